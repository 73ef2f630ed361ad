"""The CUDA flash-attention backward's own buffers, which gpuwise leaves out of a block's backward
(activations.backward_transient_bytes), checked in the traced backward where the kernel holds them.

Besides dQ, dK and dV, flash-attn 2.x mha_bwd (csrc/flash_attn/flash_api.cpp @ v2.6.3, 418d6771) and PyTorch's
port of it (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp @ 03b7c19d) allocate a float32
softmax_d (b x h x s_rounded), a float32 dq_accum (b x s_rounded x h x d_rounded) and, with fewer K/V heads than
query heads, dk_expanded / dv_expanded at query-head width in the input dtype, summed into dK / dV after the
kernel. The CPU flash kernel that the FakeTensor trace runs allocates dQ, dK and dV only. These buffers live
while attention runs its backward, after the MLP's backward has freed its (recomputed) tensors, so the block's
backward still peaks in the MLP: ~34 KiB against ~116 KiB per token for llama-3.2-1b (GQA 32/8, head dim 64).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from gpuwise.nn import functions as fn
from gpuwise.trace.run import StageRun, trace_phases
from gpuwise.workload.models import load_model
from gpuwise.workload.training import TrainingConfig


def _round(x: int, m: int) -> int:
    return -(-x // m) * m


def _kernel_buffers(grad, b: int, h: int, s: int, d: int, h_kv: int, scale: int) -> list:
    """What mha_bwd allocates besides dQ, dK, dV for q (b, h, s, d) and k (b, h_kv, s, d), on the device and in
    the dtype of `grad`; `scale` multiplies dq_accum's width (1: the kernel's)."""
    d_r = _round(d, 32 if d <= 128 else 64)
    out = [grad.new_empty((b, h, _round(s, 128)), dtype=torch.float32),                  # softmax_d
           grad.new_empty((b, _round(s, 128), h, scale * d_r), dtype=torch.float32)]     # dq_accum
    if h_kv != h:
        out += [grad.new_empty((b, s, h, d)) for _ in range(2)]                         # dk/dv_expanded
    return out


def _with_kernel_buffers(attention, scale: int):
    """`fn.attention` whose backward holds the CUDA kernel's buffers while the attention backward runs: made when
    the output's gradient arrives, released when the query's gradient leaves (tensor hooks: the forward and what
    it saves stay as they are)."""
    held: list = []

    def wrapped(q, k, v, **kw):
        out = attention(q, k, v, **kw)
        if out.requires_grad and q.requires_grad:
            dims = (*q.shape, k.shape[1])          # shapes only: a closure over q or k would keep them alive
            out.register_hook(lambda grad: held.append(_kernel_buffers(grad, *dims, scale)))
            q.register_hook(lambda grad: held.pop() and None)
        return out

    return wrapped


def _block_windows(spec, cfg, monkeypatch, scale: int | None) -> list[int]:
    """Peak bytes of each traced backward window of one step (scale None: the trace as it is)."""
    if scale is not None:
        monkeypatch.setattr(fn, "attention", _with_kernel_buffers(fn.attention, scale))
    phases = trace_phases(spec, cfg, StageRun(layers=2))
    monkeypatch.undo()
    return [p["peak"] for name, p in phases if name.startswith("backward")]


@pytest.mark.parametrize("recompute,lora", [("full", 0), ("full", 16), ("none", 0)])
def test_flash_backward_buffers_never_raise_the_backward_peak(monkeypatch, recompute, lora):
    """llama-3.2-1b's dimensions (GQA: the expanded dK/dV are allocated), two blocks: with the kernel's buffers
    every backward window peaks at the same bytes as without them; 20x the float32 accumulator does raise the
    blocks' window (the buffers are in the trace, and the check can fail)."""
    spec = replace(load_model("llama-3.2-1b"), vocab_size=2048)
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, recompute=recompute, lora_rank=lora)
    plain = _block_windows(spec, cfg, monkeypatch, None)
    assert _block_windows(spec, cfg, monkeypatch, 1) == plain
    assert max(_block_windows(spec, cfg, monkeypatch, 20)) > max(plain)
