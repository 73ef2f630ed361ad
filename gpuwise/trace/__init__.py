"""Traced ground truth of training memory: real PyTorch training steps under FakeTensorMode.

`trace_memory(spec, cfg)` builds the model with gpuwise.nn, runs a warm-up step (so the optimizer
state exists) and counts every tensor of a second step: parameters, gradients, optimizer state,
activations kept for backward, temporaries (including the fp32 logits/loss and their gradients),
collective buffers. Bytes are per GPU, for the most loaded rank. No GPU and no weights are needed.

Precision semantics (what torchtitan / FSDP2 / PyTorch do):
- fp32: fp32 parameters, gradients, activations and optimizer state.
- bf16-mixed (fp16-mixed alike), no FSDP: fp32 parameters and gradients, computation in bf16 as
  torch.autocast does it: every matmul reads bf16 copies of its fp32 weight and input, and the
  weight copy is kept for backward until that layer's backward (autocast's cached casts); norms,
  softmax and the loss in fp32; the residual stream stays fp32; AdamW states fp32.
- bf16-mixed under FSDP2 (zero=3, dp*cp > 1): fp32 sharded parameters; all-gathered unsharded
  parameters in bf16 (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)), so activations
  and the residual stream are bf16; unsharded gradients bf16, reduce-scattered in fp32 to fp32
  sharded gradients; fp32 AdamW states on the shard.
- bf16: parameters, gradients, activations and AdamW states all bf16 (no master copy).
- LoRA/QLoRA: the frozen base is stored in 16-bit under any 16-bit precision (NF4 for QLoRA's
  linear layers, output layer 16-bit), adapters in fp32 (PEFT's autocast_adapter_dtype) except
  under pure bf16.
The loss is an fp32 cross-entropy on the logits (logits cast to fp32, log-softmax kept).
Optimizers: AdamW/Adam fused (torchtitan's default; `foreach=True` for PyTorch's CUDA default with
its whole-model temporaries), SGD with momentum, Adafactor, block-wise 8-bit AdamW.

The caching allocator's reserve (one GPU): `reserved.record(spec, cfg)` records every storage that building the
model and three training steps allocate and free (`allocations`), and `Replay.run()` replays them through
PyTorch's caching-allocator rules (`allocator`) to the steady reserve, at a fixed or a drawn length per
micro-batch, and under a device's capacity to its out-of-memory error (docs/allocator.md).

torch is optional: pip install 'gpuwise[trace]'.
"""

from gpuwise.trace.memory import TraceResult, trace_memory

__all__ = ["trace_memory", "TraceResult"]
