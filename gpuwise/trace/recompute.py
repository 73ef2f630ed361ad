"""Activation recompute policies by name (gpuwise.workload.training.recompute_policy), in PyTorch:

- full:      torch.utils.checkpoint around every block (only its input is kept);
- layer-K:   the same around every K-th block (torchtitan's layer-level SAC);
- op:        torchtitan's op-level SAC: inside every block, the outputs of matmuls and attention
             kernels are saved except every second matmul, everything else is recomputed
             (create_selective_checkpoint_contexts with a counting policy);
- selective: Megatron-core's attention-core recompute: scores, softmax, dropout and
             probabilities x V are recomputed (torch.utils.checkpoint around that region).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from gpuwise.workload.training import recompute_policy

_aten = torch.ops.aten
# what torchtitan's op-level policy keeps (matmuls and attention kernels; addmm is a matmul with bias)
_MATMULS = (_aten.mm.default, _aten.addmm.default)
_SAVE = set(_MATMULS) | {
    _aten._scaled_dot_product_flash_attention.default, _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default, _aten.max.default,
}


def _op_policy():
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in _MATMULS:
            counts[mode] += 1
        keep = func in _SAVE and not (func in _MATMULS and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _op_context():
    return create_selective_checkpoint_contexts(_op_policy())


class Checkpointed(nn.Module):
    """A block run under torch.utils.checkpoint (optionally with a selective policy)."""

    def __init__(self, block: nn.Module, selective: bool):
        super().__init__()
        self.block, self.selective = block, selective

    def forward(self, *args):
        kw = {"context_fn": _op_context} if self.selective else {}
        return checkpoint(self.block, *args, use_reentrant=False, **kw)


def _checkpoint_core(attn: nn.Module) -> None:
    """Megatron selective: wrap the attention core of one attention module in a checkpoint."""
    core = attn.core
    attn.core = partial(checkpoint, core, use_reentrant=False)


def apply_recompute(model: nn.Module, name: str, first_layer: int = 0) -> None:
    """Apply recompute policy `name` to every block list of `model` (layer indices start at
    `first_layer`, so layer-K counts across pipeline stages)."""
    policy = recompute_policy(name)
    if policy.kind == "none":
        return
    for mod in list(model.modules()):
        blocks = getattr(mod, "blocks", None)
        if not isinstance(blocks, nn.ModuleList):
            continue
        for i, blk in enumerate(blocks):
            if policy.kind == "selective":
                for sub in blk.modules():
                    if hasattr(sub, "core"):
                        _checkpoint_core(sub)
            elif policy.kind == "op":
                blocks[i] = Checkpointed(blk, selective=True)
            elif policy.checkpointed(first_layer + i):
                blocks[i] = Checkpointed(blk, selective=False)
