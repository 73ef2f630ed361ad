"""Frenzy's heterogeneity-aware scheduler (HAS; Chang et al., arXiv:2412.14479, notes E.4).

For each waiting job (arrival order) it walks a list of resource plans -- (GPU type, GPU count)
on which the job's batch fits in memory, ranked by predicted speed -- and takes the first plan
that best-fit placement can realise now (exact node fit, else least remaining, else greedy across
nodes). Jobs for which no plan fits wait. Running jobs are never moved.

Plans per GPU type start at the fewest GPUs whose per-GPU batch fits in memory (the memory
predictor's answer) and double while the parallel efficiency relative to that fewest-GPU plan
stays >= ``min_efficiency`` (our rule: the paper does not publish its priority key). Plans are
computed once per (application, batch, GPU types) and cached, so a decision is a list walk.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Callable

from gpuwise.policies.base import Allocation, Decision, JobState, PerfModel, Policy, SchedView
from gpuwise.policies.placement import best_fit


@lru_cache(maxsize=None)
def memory_limit(app: str, gpu: str) -> int | None:
    """Largest per-GPU batch of a Pollux application that the memory estimator says fits on
    ``gpu`` (binary search over micro-batches); None when the application has no model preset."""
    from gpuwise.data import data_path
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.training import TrainingConfig

    apps = json.loads(data_path("scheduling", "pollux_app_models.json").read_text())
    if app not in apps:
        return None
    a, spec = apps[app], get_gpu(gpu)
    lo, hi = 0, 1 << 17
    while lo < hi:
        mid = (lo + hi + 1) // 2
        cfg = TrainingConfig(micro_batch=mid, seq_len=a["seq_len"], precision=a["precision"],
                             optimizer=a["optimizer"])
        if estimate_memory(a["model"], cfg).fits(spec):
            lo = mid
        else:
            hi = mid - 1
    return lo or None


class Frenzy(Policy):
    name = "frenzy"

    def __init__(self, min_efficiency: float = 0.8,
                 max_local_fn: Callable[[str, str], int | None] | None = None):
        self.min_efficiency = float(min_efficiency)  # keep bigger plans while speedup/GPU >= this
        # (application, gpu) -> largest per-GPU batch that fits; default: the memory estimator
        self.max_local_fn = max_local_fn if max_local_fn is not None else memory_limit
        self._plans: dict[tuple, list[tuple[str, int]]] = {}
        self.memory_source = ("gpuwise.estimate.memory on the apps' model presets, "
                              "gpuwise/data/scheduling/pollux_app_models.json" if max_local_fn is None
                              else "a supplied per-GPU batch limit")

    def describe(self) -> list[str]:
        return [f"frenzy: plans = fewest GPUs whose per-GPU batch fits ({self.memory_source}), doubled "
                f"while parallel efficiency >= {self.min_efficiency:g}, ranked by predicted speed at the "
                "user's batch (if none fits: the user's GPU count with gradient accumulation); first plan "
                "best-fit can place; no preemption"]

    def plans(self, js: JobState, view: SchedView, perf: PerfModel) -> list[tuple[str, int]]:
        job = js.job
        cap = view.cluster.capacity_by_type()
        types = tuple(t for t in cap if job.gpu_type in (None, t))
        key = (job.application, job.batch_size, job.num_gpus if job.rigid else 0, types)
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        scored: list[tuple[float, int, str, int]] = []
        for order, t in enumerate(types):
            if job.rigid:
                scored.append((0.0, order, t, job.num_gpus))
                continue
            b = int(job.batch_size or perf.batch_range(job, t)[0])
            limit = self.max_local_fn(job.application, t) if self.max_local_fn else None
            if limit is None:
                limit = perf.batch_range(job, t)[2]
            n_min = max(1, -(-b // max(1, limit)))
            if n_min > cap[t]:
                continue
            gpn = view.cluster.spec.max_gpus_per_node(t)
            fresh = JobState(job=job, submitted_s=0.0, target=js.target)  # speed at the start
            speed = perf.goodput_grid(fresh, t, cap[t], gpn, (b,))[:, 0]
            while n_min <= cap[t] and speed[n_min - 1] <= 0:
                n_min += 1  # the speed model cannot run that per-GPU batch: take the next count it can
            if n_min > cap[t]:
                continue
            base = speed[n_min - 1] / n_min
            n = n_min
            while n <= min(cap[t], b):
                if speed[n - 1] <= 0 or (n > n_min and speed[n - 1] / n < self.min_efficiency * base):
                    break
                scored.append((-float(speed[n - 1]), order, t, n))
                n *= 2
        plans = [(t, n) for _, _, t, n in sorted(scored)]
        if not plans:  # the batch fits nowhere in one step: the user's request, accumulating gradients
            plans = [(t, job.num_gpus) for t in types if job.num_gpus <= cap[t]]
        self._plans[key] = plans
        return plans

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        if not view.pending:
            return Decision()
        state = view.cluster.copy()
        free = state.free_by_type()
        out = {}
        for name, js in view.pending.items():
            if not any(free.values()):
                break
            for t, n in self.plans(js, view, perf):
                if free[t] < n:
                    continue
                pl = best_fit(state, t, n)
                if pl is not None:
                    alloc = Allocation(t, pl, js.job.batch_size)
                    state.allocate(alloc)
                    free[t] -= n
                    out[name] = alloc
                    break
        return Decision(out)
