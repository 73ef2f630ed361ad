"""Elastic DP policy (Saxena et al., "Effective Elastic Scaling of Deep Learning Workloads",
MASCOTS'20) and its fixed-batch baseline.

Each round (on arrivals and completions, at most every ``min_interval_s``, and at least every
``period_s`` while jobs run) it re-solves the DP of
`dp.py` over the running jobs plus the waiting ones (FIFO), with V_j(g) the best goodput over the
job's batch range (``elastic=True``) or at the job's own batch (``elastic=False``, the paper's
baseline that rescales GPU counts but never the batch). Under ``admission="drop"`` (the paper's
rule) each new job that cannot get its minimum next to the running jobs and the jobs before it is
dropped, and the DP goes on with the next ones; under ``"queue"`` the DP keeps the longest feasible
FIFO prefix and the rest wait. The paper's cluster is
homogeneous; on several GPU types we run one DP per type, a job staying on the type it started on
and a new job going to the type with the most GPUs per waiting job (an extension, stated).
"""

from __future__ import annotations

import numpy as np

from gpuwise.errors import InputError
from gpuwise.policies.admission import check_admission, refused
from gpuwise.policies.base import Decision, JobState, PerfModel, Policy, SchedView
from gpuwise.policies.dp import dp_allocate
from gpuwise.policies.placement import best_fit, place_shares
from gpuwise.policies.pools import type_pools
from gpuwise.policies.value import DEFAULT_OBJECTIVE, OBJECTIVES, value_table


class ElasticDP(Policy):
    needs_progress = True

    def __init__(self, elastic: bool = True, admission: str = "drop", min_interval_s: float = 60.0,
                 hysteresis: float = 0.1, objective: str = DEFAULT_OBJECTIVE, period_s: float | None = 300.0):
        self.elastic = elastic                    # choose the batch per GPU count (False: user's batch)
        self.admission = check_admission(admission)
        self.min_interval_s = float(min_interval_s)  # fewest seconds between two re-optimisations
        # most seconds between two re-optimisations while jobs run (None: arrivals/completions only).
        # V_j(g) moves with training progress (the gradient noise grows, so larger batches on more
        # GPUs become efficient): an allocation chosen at arrival goes stale. Without this a lone
        # yolov3 job keeps its early 1-2 GPU choice and takes 4.4 h instead of 1.0 h on 64 T4s.
        self.period_s = None if period_s is None else float(period_s)
        # a running job's value at any other (GPUs, batch) is discounted by this fraction, so it is
        # only rescaled (a checkpoint-restart) for a clear gain
        self.hysteresis = float(hysteresis)
        if objective not in OBJECTIVES:
            raise InputError("--objective", objective, "use one of " + ", ".join(OBJECTIVES))
        self.objective = objective  # what V_j(g) measures: a key of gpuwise.policies.value.OBJECTIVES
        self.name = "elastic-dp" if elastic else "elastic-dp-fixed-batch"

    def describe(self) -> list[str]:
        every = f" and at least every {self.period_s:g} s while jobs run" if self.period_s else ""
        return [f"{self.name}: DP over GPU counts{' and batch sizes' if self.elastic else ' (batch fixed)'}, "
                f"admission={self.admission}, re-optimised on arrival/completion at most every "
                f"{self.min_interval_s:g} s{every}, hysteresis {self.hysteresis:.0%} against rescaling a "
                f"running job; objective {self.objective}: V_j(g) = {OBJECTIVES[self.objective]} "
                "(the paper's normalisation is unpublished)"]

    def _pools(self, view: SchedView, perf: PerfModel) -> dict[str, list[JobState]]:
        return type_pools(view, perf)

    def _table(self, perf: PerfModel, js: JobState, gpu: str, K: int, gpn: int):
        v, b, ref = value_table(perf, js, gpu, K, gpn, self.elastic, self.objective)
        cur = js.allocation
        if cur is None or self.hysteresis <= 0 or cur.gpu_type != gpu:
            return v, b, ref
        g0 = cur.num_gpus
        keep = v[g0] if g0 < len(v) else -np.inf
        if cur.batch_size is not None and g0 < len(v):
            now_b = perf.goodput_grid(js, gpu, g0, gpn, (cur.batch_size,))[g0 - 1, 0] / ref
            if now_b > 0 and v[g0] <= now_b * (1 + self.hysteresis):
                b = b.copy()
                b[g0] = cur.batch_size  # not worth a restart just to change the batch
                keep = now_b
        v = v * (1 - self.hysteresis)
        if g0 < len(v):
            v[g0] = keep
        return v, b, ref

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        shares: dict[str, tuple[str, int, int | None]] = {}
        cap = view.cluster.capacity_by_type()   # less than the spec's once a node is lost
        for gpu, jobs in self._pools(view, perf).items():
            K = cap[gpu]
            if not jobs or K < 1:
                continue
            gpn = view.cluster.spec.max_gpus_per_node(gpu)
            jobs = jobs[:K]  # queue trimming: at most K jobs can each hold a GPU
            tables = [self._table(perf, js, gpu, K, gpn) for js in jobs]
            # drop: each new job is admitted or refused on its own (a refused one does not block the
            # later ones); queue: strict FIFO, so a waiting job is never overtaken and cannot starve
            _, gs, idx = dp_allocate([t[0] for t in tables], K, skip=self.admission == "drop")
            for i, g in zip(idx, gs):
                b = tables[i][1]
                shares[jobs[i].name] = (gpu, g, None if jobs[i].job.rigid else int(b[g]))
        allocs = place_shares(view, shares, best_fit)
        granted = {n for n, a in allocs.items() if a is not None} | set(view.running)
        return Decision(allocs, refused(self.admission, view.new, granted))
