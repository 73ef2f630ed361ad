"""Rigid baselines with the user's requested GPUs (no batch or size changes, no preemption).

- `fifo`: strict arrival order; the head of the queue blocks the jobs behind it.
- `first-fit`: scans the whole queue in arrival order and starts every job that fits now
  (backfilling), placed first-fit -- the baseline of Frenzy's evaluation.
A job without a GPU type runs on the first type (cluster order) it runs on that can place it.
On an unbounded cluster nothing waits: every job starts on arrival on machines rented for it.
"""

from __future__ import annotations

import math

from gpuwise.policies.base import Decision, PerfModel, Policy, SchedView
from gpuwise.policies.placement import PlaceFn, best_fit, first_fit, place_request


class Fifo(Policy):
    """Strict FIFO with the user's GPU count; ``backfill=True`` gives the first-fit baseline."""

    unbounded_ok = True

    def __init__(self, backfill: bool = False, place: PlaceFn | None = None):
        self.backfill = backfill                # start later jobs when the head does not fit
        self.place = place or (first_fit if backfill else best_fit)  # node choice
        self.name = "first-fit" if backfill else "fifo"

    def describe(self) -> list[str]:
        return [f"{self.name}: user's requested GPUs and batch, "
                + ("queue scanned in order, any job that fits starts, first-fit nodes" if self.backfill
                   else "strict arrival order (head-of-line blocking), best-fit nodes")]

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        out = {}
        if not view.pending:
            return Decision()
        state = view.cluster.copy()
        free = math.inf if state.unbounded else sum(state.free)
        for name, js in view.pending.items():
            if free == 0:
                break
            if js.job.num_gpus <= free:
                alloc = place_request(state, js, self.place, perf=perf)
                if alloc is not None:
                    out[name] = alloc
                    free -= alloc.num_gpus
                    continue
            if not self.backfill:
                break
        return Decision(out)
