"""Rental policies (issue 5: pi* and its baselines) through THE scheduling interface of base.py.

`FixedWidthScheduler` wraps a `gpuwise.policies.fixed_width.RentalPolicy`: when a job arrives it
asks the rental policy for the job's width k (from its type and size), then allocates k GPUs and
never rescales or preempts (paper A.2 Definition 1). On an unbounded cluster every job starts on
arrival, which is the paper's pay-per-use cloud; on a fixed cluster jobs wait in arrival order for
their k GPUs. The same object therefore runs in the cluster simulator and, later, on Ray.

Widths are drawn one job at a time in arrival order from the caller's generator. Integer pi*
randomises at most one type between two adjacent widths, so these draws are exactly the ones
`gpuwise.sim.cloud.simulate` makes in a single vectorised call from a generator in the same state:
both simulators see the same widths for the same seeded stream.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from gpuwise.errors import InputError
from gpuwise.policies.base import Allocation, Decision, PerfModel, Policy, SchedView
from gpuwise.policies.fixed_width import RentalPolicy
from gpuwise.policies.placement import PlaceFn, best_fit, place_request


class FixedWidthScheduler(Policy):
    """A fixed-width rental policy as a scheduling `Policy` (allocate k_i GPUs on arrival, keep them)."""

    unbounded_ok = True

    def __init__(self, rental: RentalPolicy, type_names: Sequence[str], rng: np.random.Generator | None = None,
                 size_unit_s: float = 3600.0, place: PlaceFn = best_fit) -> None:
        """``rental``: answers the width of a job from its type index and size; ``type_names``: the
        stream's job types in the rental policy's order (a job's ``job_type`` picks one);
        ``rng``: source of the randomised widths (integer pi* mixes two widths for one type);
        ``size_unit_s``: seconds per unit of the rental policy's job size (sizes there are
        single-GPU hours; a job's ``duration_s`` is its single-GPU seconds); ``place``: node choice."""
        self.rental = rental
        self.name = rental.name
        self.types = {n: i for i, n in enumerate(type_names)}
        self.rng = rng or np.random.default_rng(0)
        self.size_unit_s = float(size_unit_s)
        self.place = place
        self._width: dict[str, int] = {}  # widths drawn for jobs that have not started yet

    def describe(self) -> list[str]:
        return [f"{self.name}: fixed width per job chosen on arrival from its type"
                + (" and size" if not hasattr(self.rental, "widths") else "")
                + ", kept until completion (no rescaling); jobs wait in arrival order when GPUs are short"]

    def width(self, js) -> int:
        """The rental policy's width for one job, checked to be a whole number of GPUs >= 1."""
        job = js.job
        if job.job_type not in self.types:
            raise InputError(f"job {job.name} type", job.job_type, "valid: " + ", ".join(self.types))
        size = (job.duration_s or 0.0) / self.size_unit_s
        k = float(self.rental.assign(np.array([self.types[job.job_type]]), np.array([size]), self.rng)[0])
        if k < 1 or abs(k - round(k)) > 1e-9:
            raise InputError(f"policy {self.name} width", f"{k:g}",
                             "a cluster allocates whole GPUs: use integer widths (gpuwise rent --integer)")
        return int(round(k))

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        for name in view.new:
            js = view.pending.get(name)
            if js is not None:
                self._width[name] = self.width(js)
        state = view.cluster.copy()
        out: dict[str, Allocation | None] = {}
        for name, js in view.pending.items():
            alloc = place_request(state, js, self.place, self._width[name])
            if alloc is None:
                break  # strict arrival order on a fixed cluster
            out[name] = alloc
            del self._width[name]
        return Decision(out)
