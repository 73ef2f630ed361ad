"""The one training step that the memory measurements run: the memory trace (`run.trace_phases`, under PyTorch's
memory trackers), the allocation recording the allocator simulation replays (`allocations.record_run`) and the GPU
harness (`validation.gpu_measure`, on a real GPU). One loop, so that what is traced, what is replayed and what is
measured are the same operations in the same order. (`validation.host_ops` runs its own phases to count the ops of
each.)"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch


def _no_mark(_what: str) -> None:
    return None


def train_step(model, opts: list, cfg, batches: Iterable, *, ops: str | None = None, head: bool = True,
               sync_last_only: bool = False, on_forward: Callable[[], None] | None = None,
               mark: Callable[[str], object] = _no_mark) -> None:
    """One optimizer step, as a plain PyTorch loop runs it: gradients set to None; forwards (F) and backwards (B)
    in the order `ops` gives (default: F then B per micro-batch; a pipeline stage's 1F1B order otherwise), each
    backward on the oldest forward's output (gradients accumulate); the optimizer step, unless each parameter
    was stepped in its gradient hook (optimizer in backward).

    batches: one item per forward, taken as the forward starts (a generator makes each lazily): token ids (the
    labels are the inputs) or an (inputs, labels) pair. head: the stage computes the loss (else its output's
    backward gets a gradient of ones, as a pipeline's next stage would send). sync_last_only: FSDP reduces the
    gradients on the last backward only (torch.distributed.pipelining). on_forward: called before each forward.
    mark: called with "forward", "backward" and "optimizer step" after each. Activation offload: every saved
    tensor goes to (pinned, on CUDA) host memory through PyTorch's ``save_on_cpu`` hooks."""
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    ops = ops or "FB" * len(batches)           # a generator of batches comes with its ops
    items = iter(batches)
    outs = []
    for n, op in enumerate(ops):
        if op == "F":
            if on_forward is not None:
                on_forward()
            outs.append(_forward(model, cfg, next(items), head))
            mark("forward")
            continue
        if sync_last_only:
            model.set_requires_gradient_sync("B" not in ops[n + 1:])
        out = outs.pop(0)
        out.backward(None if head else torch.ones_like(out))
        del out
        mark("backward")
    if not cfg.optimizer_in_backward:
        opts[0].step()
    mark("optimizer step")


def _forward(model, cfg, batch, head: bool):
    """One forward. The batch is referenced only here, and a stage without the loss drops its labels first: what
    autograd saves of it lives on, the rest dies as in ``model(*make_batch())``."""
    pair = batch if isinstance(batch, tuple) else (batch, batch)
    del batch
    args = pair if head else pair[:1]
    del pair
    offload = (torch.autograd.graph.save_on_cpu(pin_memory=args[0].is_cuda) if cfg.activation_offload
               else contextlib.nullcontext())
    with offload:
        return model(*args)
