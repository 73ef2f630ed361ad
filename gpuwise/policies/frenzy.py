"""Frenzy's heterogeneity-aware scheduler (HAS; Chang et al., arXiv:2412.14479, notes E.4).

For each waiting job (arrival order) it walks a list of resource plans -- (GPU type, GPU count)
on which the job's batch fits in memory, ranked by predicted speed -- and takes the first plan
that best-fit placement can realise now (exact node fit, else least remaining, else greedy across
nodes). Jobs for which no plan fits wait. Running jobs are never moved.

Plans per GPU type (our rule: the paper does not publish its priority key): GPU counts that are
powers of two, the fewest GPUs on which the batch fits in one step (the memory predictor's
answer) and the user's request; below the fewest-that-fit count a plan keeps the global batch and
accumulates gradients over micro-batches that fit, so a large batch does not need a large share of
the cluster (ImageNet at batch 6400 needed 53 T4s without it). Kept: plans whose per-GPU goodput
is >= ``min_efficiency`` of the type's most efficient plan and whose goodput is >= ``min_speed`` of
the fastest such plan (a job does not grab a plan far slower than its best just because it is
free now -- without a floor it would run ImageNet on one GPU for days). Plans are computed once per
(application, batch, request, GPU types) and cached, so a decision is a list walk.
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
    ``gpu`` (the shared ``performance.largest_micro_batch``, exact); None when the application has no
    model preset or not even one sample fits."""
    from gpuwise.data import data_path
    from gpuwise.estimate.performance import largest_micro_batch
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import TrainingConfig

    apps = json.loads(data_path("scheduling", "pollux_app_models.json").read_text())
    if app not in apps:
        return None
    a = apps[app]
    cfg = TrainingConfig(seq_len=a["seq_len"], precision=a["precision"], optimizer=a["optimizer"])
    return largest_micro_batch(load_model(a["model"]), cfg, get_gpu(gpu), limit=1 << 17, powers_of_two=False) or None


class Frenzy(Policy):
    name = "frenzy"

    def __init__(self, min_efficiency: float = 0.8, min_speed: float = 0.75,
                 max_local_fn: Callable[[str, str], int | None] | None = None):
        self.min_efficiency = float(min_efficiency)  # plans keep per-GPU goodput >= this x the best
        # plans keep goodput >= this x the type's fastest efficient plan (0.7-1.0 give the same mean
        # JCT on the 8 Pollux workloads; 0.5 and below let long jobs start on far too few GPUs)
        self.min_speed = float(min_speed)
        # (application, gpu) -> largest per-GPU batch that fits; default: the memory estimator
        self.max_local_fn = max_local_fn if max_local_fn is not None else memory_limit
        self._plans: dict[tuple, list[tuple[str, int]]] = {}
        self.memory_source = ("gpuwise.estimate.memory on the apps' model presets, "
                              "gpuwise/data/scheduling/pollux_app_models.json" if max_local_fn is None
                              else "a supplied per-GPU batch limit")

    def describe(self) -> list[str]:
        return [f"frenzy: plans = GPU counts (powers of two, fewest whose per-GPU batch fits per "
                f"{self.memory_source}, the user's request; fewer GPUs accumulate gradients at the user's "
                f"batch) with per-GPU goodput >= {self.min_efficiency:g} x the most efficient and goodput "
                f">= {self.min_speed:g} x the fastest of them, ranked by predicted speed; first plan "
                "best-fit can place; no preemption"]

    def plans(self, js: JobState, view: SchedView, perf: PerfModel) -> list[tuple[str, int]]:
        job = js.job
        cap = view.cluster.capacity_by_type()
        types = tuple(t for t in cap if job.gpu_type in (None, t))
        key = (job.application, job.jobspec, job.batch_size, job.num_gpus, types)
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        scored: list[tuple[float, int, str, int]] = []
        for order, t in enumerate(types):
            if job.rigid:
                scored.append((0.0, order, t, job.num_gpus))
                continue
            scored += [(-sp, order, t, n) for n, sp in self._type_plans(js, t, view, perf)]
        plans = [(t, n) for _, _, t, n in sorted(scored)]
        self._plans[key] = plans
        return plans

    def _type_plans(self, js: JobState, t: str, view: SchedView, perf: PerfModel) -> list[tuple[int, float]]:
        """(GPUs, predicted goodput) of the job's plans on GPU type ``t``.

        Candidates: powers of two, the fewest GPUs on which the batch fits in one step (memory
        estimator) and the user's request. On fewer GPUs than that the plan accumulates gradients
        (same global batch, micro-batch that fits: ceil(local / limit) micro-steps), so a big batch
        does not need a big share of the cluster. Kept: plans whose per-GPU goodput is at least
        ``min_efficiency`` of the best per-GPU goodput among the candidates."""
        job = js.job
        cap = view.cluster.spec.gpus_of_type(t)
        b = int(job.batch_size or perf.batch_range(job, t)[0])
        limit = self.max_local_fn(job.application, t) if self.max_local_fn else None
        if limit is None:
            limit = perf.batch_range(job, t)[2]
        most = min(cap, max(1, b))  # at least one sample per GPU
        cands = {1 << k for k in range(most.bit_length()) if 1 << k <= most}
        cands |= {n for n in (-(-b // max(1, limit)), job.num_gpus) if 1 <= n <= most}
        gpn = view.cluster.spec.max_gpus_per_node(t)
        fresh = JobState(job=job, submitted_s=0.0, target=js.target)  # speed at the start
        speed = perf.goodput_grid(fresh, t, most, gpn, (b,), accumulate=True)[:, 0]
        per_gpu = {n: float(speed[n - 1]) / n for n in sorted(cands) if speed[n - 1] > 0}
        if not per_gpu:
            return []
        best = max(per_gpu.values())
        kept = [(n, float(speed[n - 1])) for n, e in per_gpu.items() if e >= self.min_efficiency * best]
        top = max(sp for _, sp in kept)
        return [(n, sp) for n, sp in kept if sp >= self.min_speed * top]

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
