"""Pollux (Qiao et al., OSDI'21; peers.md section 2): co-adaptive GPUs and batch size.

Each job's *speedup* at g GPUs is its best goodput (throughput x statistical efficiency, over its
batch range, from the `PerfModel` the caller passes: the oracle in the simulator, the shared
JobModel when fitted) divided by its best goodput on one GPU (on the fewest GPUs it runs on when its
smallest batch does not fit one GPU: this policy does not accumulate gradients). Every scheduling
interval the policy maximises the power mean with p = -1 of the speedups of the jobs it runs, i.e.
minimises sum_j 1 / s_j(g_j); a job left without GPUs would make that mean 0, so the number of jobs that run
comes first (lexicographically) and ties go to the earlier job.

- Restart penalty (Pollux artifact): a running job's speedup at any other allocation is scaled by
  max(age - restarts x delay, 0) / (age + delay) -- the fraction of its life it would have spent
  working had it restarted once more -- so jobs that just (re)started are not moved again.
- Interference avoidance: counts are Sia/Pollux-style configurations (powers of two inside one node,
  whole nodes beyond), placed by `whole_node_fit`, so no two distributed jobs share a node.
- Search: the objective is separable per job with one capacity per GPU type, so the exact
  knapsack DP of `knapsack.py` replaces Pollux's genetic algorithm (tests: equal to brute force;
  a GA can only match it). One DP per GPU type (`pools.type_pools`): Pollux is heterogeneity-unaware.
"""

from __future__ import annotations

import numpy as np

from gpuwise.policies.base import Decision, JobState, PerfModel, Policy, SchedView
from gpuwise.policies.knapsack import configurations, knapsack_allocate
from gpuwise.policies.placement import place_shares, whole_node_fit
from gpuwise.policies.pools import type_pools
from gpuwise.policies.value import value_table

MIN_SPEEDUP = 1e-3  # a restart factor of 0 must not make 1/s infinite


def restart_factor(js: JobState, now: float, delay_s: float) -> float:
    """Pollux's penalty on re-allocating a running job: the share of its life spent working if it
    restarts once more (age counted from submission, ``js.restarts`` starts so far)."""
    age = max(now - js.submitted_s, 0.0)
    return max(age - js.restarts * delay_s, 0.0) / (age + delay_s)


class Pollux(Policy):
    name = "pollux"
    needs_progress = True

    def __init__(self, p: float = -1.0, interval_s: float = 60.0, restart_s: float = 30.0,
                 max_growth: float | None = 2.0):
        if p >= 0:
            raise ValueError("Pollux's fairness power p must be negative")
        self.p = float(p)                    # power mean exponent (the artifact's -1)
        self.interval_s = float(interval_s)  # scheduling interval (the artifact's 60 s)
        self.min_interval_s = self.period_s = self.interval_s
        self.restart_s = float(restart_s)    # rescale delay the penalty assumes (the simulator's 30 s)
        # Pollux fits each job's throughput online, so it offers a job at most this many times the
        # GPUs it has run on (before it has run, the fewest it runs on); None: trust the model everywhere
        self.max_growth = max_growth
        self._held: dict[str, int] = {}      # most GPUs each job has held

    def describe(self) -> list[str]:
        return [f"pollux: GPUs and batch co-adapted every {self.interval_s:g} s maximising the power mean "
                f"(p={self.p:g}) of speedups (best goodput / best goodput on the fewest GPUs it runs on), "
                f"jobs run first; restart penalty (age - restarts x {self.restart_s:g} s)/(age + "
                f"{self.restart_s:g} s); counts 1, 2, 4 inside a node or whole nodes (no shared nodes "
                "between distributed jobs); "
                + (f"at most {self.max_growth:g}x the GPUs a job has run on, the fewest it runs on before "
                   "it has run (its model is fitted online); "
                   if self.max_growth is not None else "") + "exact knapsack DP "
                "per GPU type instead of the artifact's genetic algorithm"]

    def options(self, js: JobState, gpu: str, cap: int, gpn: int, now: float,
                perf: PerfModel) -> dict[int, tuple[float, int | None]]:
        """{g: (speedup with the restart penalty, batch)} over the job's allowed counts on ``gpu``."""
        v, b, ref = value_table(perf, js, gpu, cap, gpn, elastic=True, objective="speedup")
        confs = set(configurations(gpn, cap))
        if self.max_growth is not None:
            # before it has run, a job is offered the fewest GPUs it can run on -- one GPU only when
            # its smallest batch fits on one (a job whose batch needs 2 GPUs would never start)
            fewest = min((g for g in confs if np.isfinite(v[g])), default=1)
            most = max(fewest, int(self.max_growth * self._held.get(js.name, 0)))
            confs = {g for g in confs if g <= most}
        if js.job.rigid and js.job.num_gpus <= cap:
            confs.add(js.job.num_gpus)
        cur = js.allocation
        factor = restart_factor(js, now, self.restart_s) if cur is not None else 1.0
        out = {}
        for g in sorted(confs):
            if not np.isfinite(v[g]):
                continue
            batch = None if js.job.rigid else int(b[g])
            s = float(v[g])
            if cur is not None and (cur.gpu_type != gpu or cur.num_gpus != g):
                s *= factor
            elif cur is not None and batch != cur.batch_size and cur.batch_size is not None:
                # same GPUs: a new batch also restarts the job here, so it must beat the old one
                now_s = perf.goodput_grid(js, gpu, g, gpn, (cur.batch_size,))[g - 1, 0] / ref
                if now_s > 0 and s * factor <= now_s:
                    s, batch = float(now_s), cur.batch_size
                else:
                    s *= factor
            out[g] = (max(s, MIN_SPEEDUP), batch)
        return out

    def allocate_type(self, jobs: list[JobState], gpu: str, cap: int, gpn: int, now: float,
                      perf: PerfModel) -> dict[str, tuple[str, int, int | None]]:
        """Shares on one GPU type: the exact maximiser of (jobs run, then the p-mean of speedups)."""
        opts = [self.options(js, gpu, cap, gpn, now, perf) for js in jobs]
        worst = max((s ** self.p for o in opts for s, _ in o.values()), default=1.0)
        lam = 1.0 + len(jobs) * worst  # one more running job outweighs any change of the others' sum
        values = [{g: lam - s ** self.p for g, (s, _) in o.items()} for o in opts]
        _, gs = knapsack_allocate(values, cap)
        return {js.name: (gpu, g, o[g][1]) for js, g, o in zip(jobs, gs, opts) if g}

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        spec = view.cluster.spec
        shares: dict[str, tuple[str, int, int | None]] = {}
        for js in view.running.values():
            self._held[js.name] = max(self._held.get(js.name, 0), js.allocation.num_gpus)
        cap = view.cluster.capacity_by_type()   # less than the spec's once a node is lost
        for gpu, jobs in type_pools(view, perf).items():
            if jobs and cap[gpu] >= 1:
                shares.update(self.allocate_type(jobs, gpu, cap[gpu],
                                                 spec.max_gpus_per_node(gpu), now, perf))
        return Decision(place_shares(view, shares, whole_node_fit))
