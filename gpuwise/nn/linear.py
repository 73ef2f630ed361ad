"""Linear layers: plain (casting to the compute dtype as autocast does), LoRA, a 4-bit NF4 base and a GPTQ base."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gpuwise.nn.functions import dropout as native_dropout, is_fake

# NF4 code book (Dettmers et al. 2023, arXiv 2305.14314, appendix E): quantiles of N(0, 1) in [-1, 1].
_NF4 = (-1.0, -0.6961928, -0.5250731, -0.3949175, -0.2844414, -0.1848449, -0.0910500, 0.0,
        0.0795803, 0.1609302, 0.2461123, 0.3379152, 0.4407098, 0.5626170, 0.7229568, 1.0)
NF4_BLOCK = 64            # values per absmax constant
NF4_BLOCK2 = 256          # absmax constants per fp32 second-level constant (double quantisation)
_CHUNK = 1 << 22          # values dequantised per step (keeps the index temporaries small)


def _cast(t: torch.Tensor | None, dtype: torch.dtype | None) -> torch.Tensor | None:
    return t if t is None or dtype is None else t.to(dtype)


class Linear(nn.Linear):
    """nn.Linear that computes in `compute_dtype` (autocast's behaviour: a cast copy of the weight
    and input, kept for backward), or in the weights' dtype when it is None."""

    compute_dtype: torch.dtype | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cd = self.compute_dtype
        return F.linear(_cast(x, cd), _cast(self.weight, cd), _cast(self.bias, cd))


class NF4Weight(nn.Module):
    """A frozen 4-bit NF4 weight: packed codes (uint8, two per byte), 8-bit absmax per 64 values
    and an fp32 constant per 256 absmax values (QLoRA double quantisation)."""

    def __init__(self, out_features: int, in_features: int):
        super().__init__()
        n = out_features * in_features
        blocks = math.ceil(n / NF4_BLOCK)
        self.shape = (out_features, in_features)
        self.register_buffer("codes", torch.zeros(math.ceil(n / 2), dtype=torch.uint8))
        self.register_buffer("absmax", torch.zeros(blocks, dtype=torch.uint8))
        self.register_buffer("absmax2", torch.ones(math.ceil(blocks / NF4_BLOCK2), dtype=torch.float32))
        self.register_buffer("table", torch.tensor(_NF4, dtype=torch.float32), persistent=False)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The full weight in `dtype`, decoded chunk by chunk into one output buffer."""
        out = torch.empty(self.shape, dtype=dtype, device=self.codes.device)
        if is_fake(self.codes):
            return out          # the CUDA kernel writes the output buffer only; under fake tensors that is all
        flat = out.view(-1)
        n = flat.numel()
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            packed = self.codes[lo // 2:(hi + 1) // 2]
            codes = torch.stack((packed >> 4, packed & 15), -1).view(-1)[: hi - lo].long()
            scale = self.absmax[lo // NF4_BLOCK:(hi - 1) // NF4_BLOCK + 1].float() / 127.0
            scale = scale * self.absmax2[lo // NF4_BLOCK // NF4_BLOCK2]
            flat[lo:hi] = (self.table[codes] * scale.repeat_interleave(NF4_BLOCK)[: hi - lo]).to(dtype)
        return out


class _NF4Matmul(torch.autograd.Function):
    """y = x W^T with W decoded on the fly; nothing but the 4-bit weight is kept (the base is frozen)."""

    @staticmethod
    def forward(ctx, x, weight: NF4Weight):
        ctx.weight = weight
        return x @ weight.dequantize(x.dtype).t()

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.weight.dequantize(grad.dtype), None


def _nf4_forward(x: torch.Tensor, xc: torch.Tensor, weight: NF4Weight, bias: torch.Tensor | None) -> torch.Tensor:
    """bitsandbytes' Linear4bit: the matmul on the input cast to the compute dtype (`xc`), the bias added, the output
    returned in the input's dtype (Linear4bit.forward: out.to(inp_dtype))."""
    y = _NF4Matmul.apply(xc, weight)
    return (y if bias is None else y + bias.to(y.dtype)).to(x.dtype)


class NF4Linear(nn.Module):
    """A frozen linear layer stored in NF4 (QLoRA's base for layers without adapters)."""

    def __init__(self, in_features: int, out_features: int, *, bias: bool, bias_dtype: torch.dtype | None):
        super().__init__()
        self.nf4 = NF4Weight(out_features, in_features)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=bias_dtype), requires_grad=False) if bias else None
        self.compute_dtype: torch.dtype | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _nf4_forward(x, _cast(x, self.compute_dtype), self.nf4, self.bias)


class GPTQWeight(nn.Module):
    """A frozen GPTQ weight as AutoGPTQ stores it (gpuwise.estimate.gptq): int32 codes packed along the input dimension,
    int32 zero points packed per group and output, fp16 scales per group and output, an int32 group index per input."""

    def __init__(self, out_features: int, in_features: int, fmt):
        super().__init__()
        bits, g = fmt.bits, fmt.group_size
        per = 32 // bits
        groups = math.ceil(in_features / g)
        self.shape, self.bits, self.group = (out_features, in_features), bits, g
        self.register_buffer("qweight", torch.zeros(math.ceil(in_features / per), out_features, dtype=torch.int32))
        self.register_buffer("qzeros", torch.zeros(groups, math.ceil(out_features / per), dtype=torch.int32))
        self.register_buffer("scales", torch.ones(groups, out_features, dtype=torch.float16))
        self.register_buffer("g_idx", torch.arange(in_features, dtype=torch.int32) // g)
        self.register_buffer("shifts", torch.arange(0, 32, bits, dtype=torch.int32), persistent=False)

    def dequantize(self) -> torch.Tensor:
        """The fp16 weight, in x out, by the op sequence AutoGPTQ's qlinear_cuda_old runs on large inputs: whole-matrix
        shifts, a narrowing cast, a mask, the zero point's subtraction and the scaling (what it holds and moves is
        what gpuwise.estimate.gptq counts)."""
        out, d_in = self.shape
        small = torch.int8 if self.bits <= 4 else torch.int16
        mask, per = (1 << self.bits) - 1, 32 // self.bits
        zeros = (self.qzeros.unsqueeze(2).expand(-1, -1, per) >> self.shifts.view(1, 1, -1)).to(small)
        zeros = ((zeros + 1) & mask).reshape(-1, 1, zeros.shape[1] * per)[..., :out]
        codes = (self.qweight.unsqueeze(1).expand(-1, per, -1) >> self.shifts.view(1, -1, 1)).to(small)
        codes = (codes & mask).reshape(-1, self.group, out)
        weight = self.scales.reshape(-1, 1, out) * (codes - zeros)
        return weight.reshape(-1, out)[:d_in]


def _gptq_forward(xc: torch.Tensor, weight: GPTQWeight, bias: torch.Tensor | None,
                  compute_dtype: torch.dtype | None) -> torch.Tensor:
    """AutoGPTQ's forward on more than 128 rows: x (2-D, `xc` cast to the compute dtype) @ the dequantised weight (under
    autocast to another dtype, its cast), a plain matmul whose autograd keeps that weight for the input's gradient (the
    frozen weight needs none, so x is not kept), then the bias."""
    w = _cast(weight.dequantize(), compute_dtype)
    y = (xc.reshape(-1, xc.shape[-1]) @ w).reshape(*xc.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias.to(y.dtype)


class GPTQLinear(nn.Module):
    """A frozen linear layer stored as GPTQ (a layer without adapters on a GPTQ base)."""

    def __init__(self, in_features: int, out_features: int, fmt, *, bias: bool):
        super().__init__()
        self.gptq = GPTQWeight(out_features, in_features, fmt)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=torch.float16), requires_grad=False) if bias else None
        self.compute_dtype: torch.dtype | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _gptq_forward(_cast(x, self.compute_dtype), self.gptq, self.bias, self.compute_dtype)


class LoRALinear(nn.Module):
    """A frozen base (16-bit Linear or NF4) plus trainable A (r x in) and B (out x r), PEFT style:
    y = base(x) + B(A(dropout(x))) * alpha / r, B initialised to zero; `peft`: PEFT's own layer, which casts the
    adapter's input to the adapters' dtype and its output back."""

    def __init__(self, in_features: int, out_features: int, rank: int, *, bias: bool, nf4: bool,
                 base_dtype: torch.dtype | None, adapter_dtype: torch.dtype | None = None,
                 alpha: float | None = None, peft: bool = False, dropout: float = 0.0, gptq=None,
                 dora: bool = False, dora_rerun: bool = False):
        super().__init__()
        self.peft = peft       # PEFT's layer: x.to(lora_A.weight.dtype) before the adapter, the output cast back
        self.dropout = dropout  # lora_dropout on the adapter's input (0: none, PEFT's nn.Identity)
        self.nf4 = NF4Weight(out_features, in_features) if nf4 else None
        self.gptq = GPTQWeight(out_features, in_features, gptq) if gptq is not None else None
        self.base = None if nf4 or gptq is not None else Linear(in_features, out_features, bias=False,
                                                                  dtype=base_dtype)
        if self.base is not None:
            self.base.weight.requires_grad_(False)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=base_dtype), requires_grad=False) if bias else None
        self.lora_a = Linear(in_features, rank, bias=False, dtype=adapter_dtype)
        self.lora_b = Linear(rank, out_features, bias=False, dtype=adapter_dtype)
        nn.init.zeros_(self.lora_b.weight)
        self.scaling = (alpha if alpha is not None else 2 * rank) / rank
        self.compute_dtype: torch.dtype | None = None
        # DoRA's trainable magnitude, one per output row (initialised to the weight's row norms; ones here)
        self.lora_magnitude = nn.Parameter(torch.ones(out_features, dtype=adapter_dtype)) if dora else None
        self.dora_rerun = dora_rerun    # PEFT's DoRA: under dropout the frozen matmul re-run on the dropped input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.lora_magnitude is not None:
            return self.dora(x, self.frozen(x))
        return self.adapter(x, self.frozen(x))

    def _weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The frozen weight (out x in) in `dtype`: the 16-bit base cast (a copy where the dtype differs), a 4-bit one
        dequantised (PEFT's dequantize_module_weight) and cast."""
        if self.nf4 is not None:
            return self.nf4.dequantize(dtype)
        return self.base.weight.to(dtype)

    def dora(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """DoRA on the frozen output `y`, as PEFT 0.14 runs it (lora/layer.py Linear.forward, lora/dora.py
        DoraLinearLayer.forward; `peft` False: torchtune's DoRALinear, the same algorithm without PEFT's input cast and
        with the frozen output reused under dropout): the adapter's weight B A rebuilt through an identity matrix,
        the row norms of W + s B A (detached: a constant, DoRA section 4.3), m / norm scaling both the frozen and the
        adapter's outputs, which the two products keep for backward. Under autocast (`compute_dtype`) the norm runs
        in float32, as torch.autocast's fp32 list has it. `dora_rerun` (PEFT's, estimate.roofline_step.
        dora_reruns_frozen): with dropout the frozen matmul runs again on the dropped input."""
        cd = self.compute_dtype
        xa = x.to(self.lora_a.weight.dtype) if self.peft else x
        base = y
        if self.dropout and self.training:
            xa = native_dropout(xa, self.dropout, True)
            base = None if self.dora_rerun else y
        eye = torch.eye(xa.shape[-1], dtype=xa.dtype, device=xa.device)
        # the adapters' weights cast once (autocast caches a weight's cast for the forward; PEFT's two calls share it)
        a_w, b_w = _cast(self.lora_a.weight, cd), _cast(self.lora_b.weight, cd)
        # B A rebuilt through the identity; its graph dies with it, only a detached copy is used. Plain F.linear, not
        # the modules: the trace's module tracker hooks every module output's grad_fn, and a hooked graph that never
        # runs backward lingers until Python's cycle collector runs
        lora_w = F.linear(F.linear(_cast(eye, cd), a_w), b_w).T
        w = self._weight(xa.dtype)
        v = w + self.scaling * lora_w.detach()
        norm = torch.linalg.vector_norm(_cast(v, torch.float32 if cd is not None else None), dim=1).to(v.dtype)
        scale = (self.lora_magnitude / norm.detach()).view(1, -1)
        lora = F.linear(F.linear(_cast(xa, cd), a_w), b_w)
        if base is None:
            base = F.linear(_cast(xa, cd), _cast(w, cd))
        out = (scale - 1) * base + scale * lora * self.scaling
        # PEFT adds to the frozen output and casts back to its dtype (result.to(torch_result_dtype)); torchtune returns
        # dora_out + base_out, in its weights' dtype
        return (y + out).to(y.dtype) if self.peft else (out + y).to(y.dtype)

    def frozen(self, x: torch.Tensor) -> torch.Tensor:
        """The frozen base's output alone (what the layer computes without its adapter)."""
        cd = self.compute_dtype
        xc = _cast(x, cd)
        if self.nf4 is not None:
            return _nf4_forward(x, xc, self.nf4, self.bias)
        if self.gptq is not None:
            return _gptq_forward(_cast(x, self.compute_dtype), self.gptq, self.bias, self.compute_dtype)
        y = F.linear(xc, _cast(self.base.weight, cd or x.dtype))
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def adapter(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The frozen output `y` plus the adapter's on input `x` (validation.adapter_ops counts what this adds)."""
        if self.peft and self.nf4 is not None:
            # PEFT's bitsandbytes layer (lora/bnb.py Linear4bit.forward): the frozen output cloned; without autocast
            # the adapter reads its input cast to the adapters' dtype and its scaled output is cast back before the sum
            y = y.clone()
            if self.compute_dtype is None:
                xa = native_dropout(x.to(self.lora_a.weight.dtype), self.dropout, self.training)
                return y + (self.lora_b(self.lora_a(xa)) * self.scaling).to(y.dtype)
        elif self.peft:
            # PEFT's Linear (lora/layer.py): x.to(lora_A.weight.dtype); the sum with the frozen output runs in the
            # adapters' dtype (a float32 sum in pure 16-bit) and is cast back after
            xa = native_dropout(x.to(self.lora_a.weight.dtype), self.dropout, self.training)
            return (y + self.lora_b(self.lora_a(xa)) * self.scaling).to(y.dtype)
        return y + self.lora_b(self.lora_a(native_dropout(x, self.dropout, self.training))) * self.scaling
