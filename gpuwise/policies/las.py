"""Tiresias-style discretised least-attained-service (2D-LAS; Gu et al., NSDI'19).

Jobs are ranked by the queue their attained service (GPU-seconds) falls in -- thresholds
``thresholds_gpu_h`` -- and by arrival within a queue; every ``period_s`` (and on arrivals and
completions) the ranked jobs get their requested GPUs greedily, preempting running jobs that no
longer rank high enough. No job-length knowledge is needed.
"""

from __future__ import annotations

import bisect

from gpuwise.policies.base import Decision, PerfModel, Policy, SchedView
from gpuwise.policies.placement import best_fit, place_shares
from gpuwise.policies.pools import allowed_types


class Las(Policy):
    name = "las"
    needs_progress = True

    def __init__(self, thresholds_gpu_h: tuple[float, ...] = (1.0, 10.0), period_s: float = 60.0):
        self.thresholds = [h * 3600.0 for h in thresholds_gpu_h]  # queue boundaries, GPU-seconds
        self.period_s = float(period_s)                            # re-ranking round length

    def describe(self) -> list[str]:
        return [f"las: Tiresias discretised LAS, queue thresholds "
                f"{', '.join(f'{t / 3600:g}' for t in self.thresholds)} GPU-hours, rounds every "
                f"{self.period_s:g} s, user's requested GPUs, preemptive"]

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        jobs = view.active()
        jobs.sort(key=lambda js: (bisect.bisect(self.thresholds, js.attained_gpu_s), js.submitted_s))
        free = view.cluster.capacity_by_type()
        shares = {}
        for js in jobs:
            types = allowed_types(js.job, free, perf)
            cur = js.allocation.gpu_type if js.allocation else None
            if cur in types:
                types = (cur,) + tuple(t for t in types if t != cur)
            for t in types:
                if free[t] >= js.job.num_gpus:
                    free[t] -= js.job.num_gpus
                    shares[js.name] = (t, js.job.num_gpus, js.job.batch_size)
                    break
        return Decision(place_shares(view, shares, best_fit))
