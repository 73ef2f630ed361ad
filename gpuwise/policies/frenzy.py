"""Frenzy's heterogeneity-aware scheduler (HAS; Chang et al., arXiv:2412.14479, notes E.4), made to
keep up with the optimisers (issue 13).

Why the first version's mean JCT was ~2-3x Sia's/the MILP's on heterogeneous streams
(`benchmarks/sched_frenzy_diagnosis.py` switches each rule below off in turn on Sia-style streams):
it fixed every job's plan at arrival and never touched a running job. With rules 3-4 off
(``rescale=False``) the mean JCT is 1.9-4.6x the best optimiser's; with them, 0.92-1.06x. The
plan's speed was rated once, at the start of training, while the gradient noise -- so the best
batch and the useful GPU count -- grows as a job trains; a job admitted into a busy cluster kept its
small plan after the cluster emptied (the cluster sat mostly idle); and a per-GPU efficiency floor
across GPU types left the slower types idle. ``min_speed``'s tuning was not the cause (0.5-1.0
gave the same JCT). The rules:

1. **Plans from the model, not the request.** A job's plans are (GPU type, count) over Sia's
   configurations (1, 2, 4 GPUs in a node, whole nodes), each at the batch the shared goodput model
   rates best for that count (users' batches are tuned for their own GPU count, and are wrong for
   others); a count no faster than a smaller one on its type is not a plan, and ``min_efficiency``
   (default 0: off) can drop plans whose goodput per GPU is below that fraction of the job's best
   on the same type (never across types: an A100 is faster per GPU than a T4). Rigid jobs have one
   plan per type: their request. Plans are re-rated at ``stages`` points of training (the speed
   model at 0, 5%, 10%, ... of the job) and cached, so a round is a list walk.
2. **A fair share while jobs wait.** With N active jobs a waiting job takes its fastest plan with
   at most max(1, capacity_t / N) GPUs of type t that placement can realise now (arrival order):
   the first fitting plan never starves the queue behind it, and with few jobs the share is the
   whole type.
3. **Give back when jobs wait.** While a job cannot start, the running job furthest over its
   share shrinks to its fastest plan within it on the same type, and admission runs again: a job
   admitted into an empty cluster does not block the next arrivals, and no job restarts when the
   waiting ones fit without it.
4. **Grow into idle GPUs.** If nobody waits after admission, each running job (longest remaining
   time first) moves to its fastest plan -- a bigger count, another type, or a better batch on the
   same GPUs -- that fits in the free GPUs plus its own, when that cuts its remaining time by more
   than ``grow_margin`` after paying ``restart_s`` for the move.

The per-GPU batch limit is the `PerfModel`'s (`batch_range`), the one the simulator enforces, so
every plan runs as predicted. Placement is `whole_node_fit` (best-fit inside one node, whole nodes beyond: Frenzy's best-fit
without splitting a job across partly used nodes). Rounds run on arrivals and completions, and
every ``period_s`` while jobs run (so rule 4 follows training progress).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpuwise.policies.base import Allocation, ClusterState, Decision, JobState, PerfModel, Policy, SchedView
from gpuwise.policies.knapsack import configurations
from gpuwise.policies.placement import whole_node_fit
from gpuwise.policies.value import batch_candidates


@dataclass(frozen=True)
class Plan:
    gpu: str
    gpus: int
    batch: int | None
    goodput: float  # predicted fraction of the job per second at the start of its stage of training


def type_plans(js: JobState, t: str, cap: int, gpn: int, perf: PerfModel,
               batches: tuple[int, ...]) -> list[Plan]:
    """Rule 1 on type ``t``: each configuration at its best batch of ``batches``, keeping only counts
    that are faster than every smaller one (more GPUs that do not help are not a plan)."""
    job = js.job
    if job.rigid:
        if job.num_gpus > cap:
            return []
        g = perf.goodput_grid(js, t, job.num_gpus, gpn, (0,))[job.num_gpus - 1, 0]
        return [Plan(t, job.num_gpus, job.batch_size, float(g))] if g > 0 else []
    if not batches:  # the job does not fit this type
        return []
    grid = perf.goodput_grid(js, t, cap, gpn, batches)
    out, top = [], 0.0
    for n in configurations(gpn, cap):
        k = int(grid[n - 1].argmax())
        g = float(grid[n - 1, k])
        if g > top * 1.001:
            out.append(Plan(t, n, int(batches[k]), g))
            top = g
    return out


def job_plans(js: JobState, shapes: dict[str, tuple[int, int]], perf: PerfModel, min_efficiency: float = 0.0,
              batches: Callable[[str], tuple[int, ...]] | None = None) -> list[Plan]:
    """Rule 1: the job's plans over the GPU types of ``shapes`` ({type: (GPUs, GPUs per node)}) at the
    job's progress, fastest first -- the first is what the policy gives the job alone on an empty
    cluster (`gpuwise.plan.submit` predicts with it). ``batches(t)``: the batch grid on type t
    (default: the model-best grid of `batch_candidates`)."""
    job = js.job
    types = [t for t in shapes if job.gpu_type in (None, t)]
    out: list[Plan] = []
    for t in types:
        grid = batches(t) if batches is not None else batch_candidates(perf, js, t, elastic=True)
        out += type_plans(js, t, *shapes[t], perf, grid)
    best_eff = {t: max((p.goodput / p.gpus for p in out if p.gpu == t), default=0.0) for t in types}
    out = [p for p in out if job.rigid or p.goodput / p.gpus >= min_efficiency * best_eff[p.gpu]]
    out.sort(key=lambda p: (-p.goodput, p.gpus))
    return out


def _smallest(plans: list[Plan], types: tuple[str, ...]) -> tuple[float, ...]:
    """The fewest GPUs of any plan on each type (inf where none): which jobs free GPUs could start."""
    return tuple(min((p.gpus for p in plans if p.gpu == t), default=math.inf) for t in types)


class Frenzy(Policy):
    name = "frenzy"
    needs_progress = True

    def __init__(self, min_efficiency: float = 0.0, grow_margin: float = 0.1, restart_s: float = 30.0,
                 model_batch: bool = True, share: bool = True, rescale: bool = True, stages: int = 20,
                 period_s: float = 300.0):
        self.min_efficiency = float(min_efficiency)  # rule 1: goodput per GPU >= this x the job's best
        self.grow_margin = float(grow_margin)        # rule 4: a move must cut remaining time by this
        self.restart_s = float(restart_s)            # rule 4: seconds a move costs (the simulator's)
        self.model_batch = model_batch               # rule 1 (False: the user's batch, as before)
        self.share = share                           # rules 2-3 (False: no cap while jobs wait)
        self.rescale = rescale                       # rules 3-4 (False: running jobs never move)
        self.stages = int(stages)                    # rule 1: plans are re-rated at this many stages
        self.period_s = float(period_s)              # rule 4 also runs this often while jobs run
        self._plans: dict[tuple, list[Plan]] = {}
        self._spec, self._shape = None, {}
        self._speeds: dict[tuple, float] = {}
        self._ident: dict[str, tuple] = {}
        self._batches: dict[tuple, tuple[int, ...]] = {}

    def describe(self) -> list[str]:
        floor = (f", goodput per GPU >= {self.min_efficiency:g} x the job's best on the type"
                 if self.min_efficiency > 0 else "")
        return [f"frenzy: plans = (GPU type, 1/2/4 GPUs in a node or whole nodes) at the "
                f"{'model-best' if self.model_batch else 'user'} batch{floor}, re-rated at {self.stages} stages "
                "of training, fastest first"
                + ("; waiting jobs capped at capacity / active jobs per type, running jobs over that share "
                   "shrink while jobs wait" if self.share else "")
                + (f"; running jobs grow into idle GPUs when it cuts remaining time by > {self.grow_margin:.0%} "
                   f"after a {self.restart_s:g} s restart, checked on arrivals, completions and every "
                   f"{self.period_s:g} s" if self.rescale else "; running jobs never move")
                + "; whole-node placement"]

    # -- rule 1: plans ---------------------------------------------------------------------
    def _stage(self, js: JobState) -> int:
        return min(int(js.fraction_done * self.stages), self.stages - 1)

    def plans(self, js: JobState, view: SchedView, perf: PerfModel) -> list[Plan]:
        """The job's plans, fastest first (cached: a decision only walks lists)."""
        job, spec = js.job, view.cluster.spec
        if self._spec is not spec:  # capacities per type, once per cluster (not per call)
            self._spec, self._plans, self._ident = spec, {}, {}
            self._shape = {t: (spec.gpus_of_type(t), spec.max_gpus_per_node(t)) for t in spec.gpu_types}
        ident = self._ident.get(job.name)
        if ident is None:  # what the plans depend on: jobs that share it share the plan lists
            batch = (job.batch_size if not self.model_batch or job.rigid
                     else tuple(perf.batch_range(job, t)[:2] for t in spec.gpu_types))
            ident = (job.application, job.jobspec, job.gpu_type, batch, job.num_gpus if job.rigid else 0,
                     job.duration_s)
            self._ident[job.name] = ident
        stage = self._stage(js)
        key = (ident, stage)
        cached = self._plans.get(key)
        if cached is None:
            # speed at the start of this stage of training (the gradient noise, so the best batch
            # and the useful GPU count, grow as a job trains)
            fresh = JobState(job=job, submitted_s=0.0, target=js.target, progress=js.target * stage / self.stages)

            def batches(t: str) -> tuple[int, ...]:  # the grid depends on the job's range, not its stage
                bkey = (ident, t)
                if bkey not in self._batches:
                    self._batches[bkey] = batch_candidates(perf, fresh, t, self.model_batch)
                return self._batches[bkey]

            cached = job_plans(fresh, self._shape, perf, self.min_efficiency, batches)
            self._plans[key] = cached
        return cached

    # -- rules 2-4: one round ----------------------------------------------------------------
    def _caps(self, view: SchedView) -> dict[str, int]:
        """Rule 2: GPUs of each type one job may take while others wait."""
        cap = view.cluster.capacity_by_type()
        n = max(1, len(view.running) + len(view.pending))
        if not self.share:
            return cap
        return {t: max(1, c // n) for t, c in cap.items()}

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        state = view.cluster.copy()
        caps = self._caps(view)
        out: dict[str, Allocation | None] = {}
        types = tuple(state.free_by_type())
        queue = []
        for js in view.pending.values():
            plans = [p for p in self.plans(js, view, perf) if js.job.rigid or p.gpus <= caps[p.gpu]]
            queue.append((js, plans, len(queue)))
        # the fewest GPUs of any plan per type (inf where none), one row per waiting job: which jobs the
        # free GPUs could start (rule 3 re-admits the whole queue after each shrink)
        self._smallest = np.array([_smallest(plans, types) for _, plans, _ in queue], float).reshape(-1, len(types))
        queue = self._admit(queue, state, out)
        if self.rescale and self.share and queue:
            over = sorted((js for js in view.running.values()
                           if not js.job.rigid and js.allocation.num_gpus > caps[js.allocation.gpu_type]),
                          key=lambda js: -js.allocation.num_gpus / caps[js.allocation.gpu_type])
            for js in over:  # rule 3, one job at a time until everybody waiting has started
                self._shrink(js, view, perf, state, caps, out)
                queue = self._admit(queue, state, out)
                if not queue:
                    break
        if self.rescale and not queue:
            self._grow(view, perf, state, out)
        return Decision(out)

    def _admit(self, queue: list[tuple[JobState, list[Plan], int]], state: ClusterState, out: dict) -> list:
        """Rules 1-2: each waiting job (arrival order) takes its fastest plan within its share
        (``queue`` holds those plans, and the job's row of ``self._smallest``) that whole-node placement
        can realise now; returns the jobs still waiting. Only jobs with a plan no larger than some type's
        free GPUs are tried (one vectorised test)."""
        free = state.free_by_type()
        if not queue:
            return []
        room = np.array([free[t] for t in free], float)
        rows = self._smallest[[q[2] for q in queue]]
        tried = np.flatnonzero((rows <= room).any(axis=1))
        left, last = [], 0
        for i in tried:
            if not any(free.values()):
                break
            left += queue[last:i]
            last = i + 1
            js, plans, _ = queue[i]
            for p in plans:  # fastest first
                if p.gpus > free[p.gpu]:
                    continue
                pl = whole_node_fit(state, p.gpu, p.gpus)
                if pl is not None:
                    out[js.name] = Allocation(p.gpu, pl, p.batch)
                    state.allocate(out[js.name])
                    free[p.gpu] -= p.gpus
                    break
            else:
                left.append(queue[i])
        return left + queue[last:]

    def _speed(self, js: JobState, plans: list[Plan], perf: PerfModel) -> float:
        """Predicted goodput of a running job where it is, at this stage of its training."""
        a = js.allocation
        p = next((p for p in plans if p.gpu == a.gpu_type and p.gpus == a.num_gpus), None)
        if p is not None and p.batch == a.batch_size:
            return p.goodput
        key = (js.name, a, self._stage(js))
        if key not in self._speeds:
            gpn = self._shape[a.gpu_type][1]
            self._speeds[key] = float(perf.goodput_grid(js, a.gpu_type, a.num_gpus, gpn,
                                                        (a.batch_size or 0,))[a.num_gpus - 1, 0])
        return self._speeds[key]

    def _shrink(self, js: JobState, view: SchedView, perf: PerfModel, state: ClusterState,
                caps: dict[str, int], out: dict) -> None:
        """Rule 3: a running job over its share drops to its fastest plan within it (same type)."""
        t = js.allocation.gpu_type
        plan = next((p for p in self.plans(js, view, perf) if p.gpu == t and p.gpus <= caps[t]), None)
        if plan is None:
            return
        state.release(js.allocation)
        pl = whole_node_fit(state, t, plan.gpus)
        alloc = Allocation(t, pl, plan.batch) if pl is not None else js.allocation
        state.allocate(alloc)
        if alloc != js.allocation:
            out[js.name] = alloc

    def _grow(self, view: SchedView, perf: PerfModel, state: ClusterState, out: dict) -> None:
        """Rule 4: with nobody waiting, running jobs move to faster plans that fit in idle GPUs."""
        free = state.free_by_type()
        if not any(free.values()):
            return  # every faster plan needs a free GPU somewhere
        rows = []
        for js in view.running.values():
            if js.job.rigid or js.name in out:
                continue
            plans = self.plans(js, view, perf)
            speed = self._speed(js, plans, perf)
            if speed > 0 and plans and plans[0].goodput > speed * (1.0 + self.grow_margin):
                rows.append(((1.0 - js.fraction_done) / speed, js, plans, speed))
        for left_s, js, plans, speed in sorted(rows, key=lambda r: -r[0]):
            own = js.allocation
            state.release(own)
            free[own.gpu_type] += own.num_gpus
            for p in plans:
                if p.gpus > free[p.gpu] or p.goodput <= speed:
                    continue
                if self.restart_s + left_s * speed / p.goodput >= left_s * (1.0 - self.grow_margin):
                    break  # plans are fastest first: slower ones gain even less
                pl = whole_node_fit(state, p.gpu, p.gpus)
                if pl is not None:
                    out[js.name] = Allocation(p.gpu, pl, p.batch)
                    break
            now = out.get(js.name, own)
            state.allocate(now)
            free[now.gpu_type] -= now.num_gpus
