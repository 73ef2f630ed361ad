"""Optimizers as the frameworks construct them: AdamW/Adam fused (torchtitan's default), SGD with
momentum (foreach), Adafactor (torch.optim), and an 8-bit AdamW holding bitsandbytes' state layout
(int8 moments with an fp32 absmax per 2048-value block), updated block-wise in fp32."""

from __future__ import annotations

import math

import torch

from gpuwise.nn.functions import is_fake

_BLOCK = 2048


class AdamW8bit(torch.optim.Optimizer):
    """Block-wise 8-bit AdamW (Dettmers et al. 2022, arXiv 2110.02861): states are uint8 codes plus an
    fp32 scale per block; each step decodes one parameter's moments in fp32, updates and re-encodes
    (on real tensors; traced under fake tensors it allocates nothing in the step, as the CUDA kernel)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                n = p.numel()
                blocks = math.ceil(n / _BLOCK)
                if not st:
                    st["step"] = 0
                    for k in ("m", "v"):
                        st[k] = torch.zeros(n, dtype=torch.uint8, device=p.device)
                        st[k + "_scale"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                st["step"] += 1
                if is_fake(p):
                    continue    # bitsandbytes' block-wise kernel updates the codes in place: no fp32 copies
                g = p.grad.float().view(-1)
                m = self._decode(st["m"], st["m_scale"], signed=True).mul_(b1).add_(g, alpha=1 - b1)
                v = self._decode(st["v"], st["v_scale"], signed=False).mul_(b2).addcmul_(g, g, value=1 - b2)
                upd = (m / (1 - b1 ** st["step"])) / ((v / (1 - b2 ** st["step"])).sqrt_().add_(group["eps"]))
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(upd.view_as(p).to(p.dtype), alpha=-group["lr"])
                self._encode(m, st["m"], st["m_scale"], signed=True)
                self._encode(v, st["v"], st["v_scale"], signed=False)

    @staticmethod
    def _decode(codes, scale, signed):
        x = codes.float()
        if signed:
            x = x - 128.0
        pad = scale.numel() * _BLOCK - codes.numel()
        x = torch.nn.functional.pad(x, (0, pad)).view(-1, _BLOCK) * (scale.view(-1, 1) / 127.0)
        return x.view(-1)[: codes.numel()].clone()

    @staticmethod
    def _encode(x, codes, scale, signed):
        pad = scale.numel() * _BLOCK - x.numel()
        blocks = torch.nn.functional.pad(x, (0, pad)).view(-1, _BLOCK)
        scale.copy_(blocks.abs().amax(1).clamp_(min=1e-12))
        q = (blocks / scale.view(-1, 1) * 127.0).round_()
        codes.copy_((q + 128.0 if signed else q).clamp_(0, 255).view(-1)[: codes.numel()].to(torch.uint8))


def make_optimizer(name: str, params, *, foreach: bool = False) -> torch.optim.Optimizer:
    """`name` as gpuwise.workload.training.OPTIMIZERS; foreach=True for the foreach AdamW (PyTorch's
    CUDA default, with its whole-model temporaries) instead of the fused kernel."""
    params = [p for p in params if p.requires_grad]
    impl = {"foreach": True} if foreach else {"fused": True}
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **impl)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4, **impl)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2, foreach=False)
    if name in ("adamw-8bit", "adamw8bit"):
        return AdamW8bit(params)
    from gpuwise.errors import InputError

    raise InputError("optimizer", name, "use adamw, adam, sgd, adafactor or adamw8bit (paged optimizers are not traced)")
