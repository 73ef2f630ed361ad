"""The allocations of a training run on one GPU, recorded under FakeTensorMode: every tensor storage that
building the model and each training step allocate and free, in order, kept as step templates that can be
replayed at any sequence of lengths (`gpuwise.trace.reserved`).

A step runs `min(grad_accum, 2)` micro-batches (forward and backward each) and the optimizer step with
`step.train_step`, the loop the trace runs and `validation.gpu_measure` times on a real GPU. Its events are
split into segments (one per micro-batch, then the optimizer step); a segment's tensor sizes depend on its own
micro-batch's length, polynomially (activations and logits grow with tokens, eager attention's scores with their
square), so three recordings at three lengths give every size at any length (Lagrange interpolation, checked
exact on a fourth length by the tests). Each free names what it frees by where that was allocated: this step's
or the previous step's segment and its allocation index there, or an allocation of the build or first steps.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

ALLOC, FREE = 1, -1


class StorageRecorder(TorchDispatchMode):
    """Every tensor storage an op creates, in order: (ALLOC, id, bytes) when first seen, (FREE, id, 0) when the
    storage dies (its weak reference's callback, as torch's MemTracker counts them)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, int, int]] = []
        self._ids = WeakIdKeyDictionary()
        self._refs: dict[int, weakref.ref] = {}
        self._next = 0

    def _see(self, t) -> None:
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        if st in self._ids:
            return
        i = self._next
        self._next += 1
        self._ids[st] = i
        self.events.append((ALLOC, i, st.nbytes()))
        events, refs = self.events, self._refs
        refs[i] = weakref.ref(st, lambda _r, i=i: (events.append((FREE, i, 0)), refs.pop(i, None)))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self._see(t)
        return out


@dataclass(frozen=True)
class Recording:
    """One run at one length: the build's events and, per step, its segments' events."""

    build: list
    steps: list[list[list]]      # steps[s][g]: events of segment g (micro-batches, then the optimizer step)


def record_run(spec, cfg, length: int, steps: int = 3) -> Recording:
    """Build `spec` under `cfg` and train `steps` steps of `min(grad_accum, 2)` micro-batches of `length` tokens
    under FakeTensorMode, recording every storage."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuwise.estimate.levers import resolve
    from gpuwise.trace.precision import dtypes
    from gpuwise.trace.run import build_rank_model, optimizers, step_in_backward
    from gpuwise.trace import step

    rec = StorageRecorder()
    cuts: list[int] = []
    micro = min(cfg.grad_accum, 2)
    with FakeTensorMode(), rec:
        model = build_rank_model(spec, cfg, dtypes(cfg.precision, False))
        opts = optimizers(cfg, model, foreach=resolve(cfg).optimizer_impl == "foreach")
        hooks = step_in_backward(model, opts, cfg.optimizer_in_backward)
        cuts.append(len(rec.events))
        for _ in range(steps):
            batches = [torch.randint(0, spec.vocab_size, (cfg.micro_batch, length)) for _ in range(micro)]
            step.train_step(model, opts, cfg, batches,
                            mark=lambda what: what == "backward" and cuts.append(len(rec.events)))
            del batches
            cuts.append(len(rec.events))
        for h in hooks:
            h.remove()
    ev = rec.events
    per = micro + 1
    segs = [ev[a:b] for a, b in zip(cuts, cuts[1:])]
    return Recording(ev[:cuts[0]], [segs[s * per:(s + 1) * per] for s in range(steps)])
