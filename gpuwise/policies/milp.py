"""Heterogeneity-aware MILP allocator in the style of Sia (SOSP'23) and Gavel (OSDI'20).

Each round it solves a binary program over job x configuration with HiGHS
(`scipy.optimize.milp`): configurations per GPU type are 1, 2, 4, ... GPUs inside one node and
whole multiples of a node (Sia's restriction that keeps the problem small and packable). Every
configuration carries the job's best goodput over its batch range, normalised by the job's
best goodput on the fewest GPUs it runs on (one GPU when it fits; V >= 1 roughly). Sia's objective:

    maximise  sum_jc x_jc * (lambda_n - V_jc^p) - lambda_a * [config differs from the current one]
    s.t.      sum_c x_jc <= 1 per job;  sum_jc gpus_c * x_jc <= capacity_t per GPU type

with p = -0.5 (fairness), lambda_n = 1.1 (a job left without GPUs costs more than any
allocation) and lambda_a = 0.01 (restart penalty). Jobs then get best-fit placement.
"""

from __future__ import annotations

import numpy as np

from gpuwise.policies.base import Decision, PerfModel, Policy, SchedView
from gpuwise.policies.knapsack import configurations
from gpuwise.policies.placement import best_fit, place_shares
from gpuwise.policies.solver import FALLBACK_RULE, SolverLog, solve_assignment
from gpuwise.policies.value import value_table


def _base_goodput(per_type) -> float:
    """Best goodput over GPU types at the smallest GPU count that has a finite value on any type."""
    feasible = [(int(np.flatnonzero(np.isfinite(v))[0]), v, ref) for _, v, _, ref, _ in per_type if np.isfinite(v).any()]
    if not feasible:
        return 0.0
    n0 = min(n for n, _, _ in feasible)
    return max(v[n0] * ref for _, v, ref in feasible if np.isfinite(v[n0]))


class Milp(Policy):
    name = "milp"
    needs_progress = True

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1, lambda_a: float = 0.01,
                 period_s: float = 300.0, time_limit_s: float = 10.0):
        self.p = p                    # fairness power on normalised goodput (< 0: favour the slow)
        self.lambda_n = lambda_n      # value of giving a job any allocation at all
        self.lambda_a = lambda_a      # penalty for changing a running job's allocation
        self.period_s = period_s      # re-solve at least this often (seconds)
        self.time_limit_s = time_limit_s  # HiGHS time limit per round
        self.node_limit: int | None = None   # HiGHS branch-and-bound nodes per round (None: none)
        self.solver = SolverLog()            # HiGHS's outcome of every round

    def describe(self) -> list[str]:
        return [f"milp: Sia-style binary program over job x (GPU type, count), p={self.p:g}, "
                f"lambda_n={self.lambda_n:g}, lambda_a={self.lambda_a:g}, HiGHS via scipy.optimize.milp, "
                f"rounds on arrival/completion and every {self.period_s:g} s",
                f"milp: HiGHS time limit {self.time_limit_s:g} s per round; {FALLBACK_RULE}"]

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        jobs = view.active()
        if not jobs:
            return Decision()
        cap = view.cluster.capacity_by_type()
        built = [self._options(js, view, perf, cap) for js in jobs]
        if not any(o for o, _ in built):
            return Decision()
        picks = solve_assignment([o for o, _ in built], cap, self.time_limit_s, self.solver, self.node_limit)
        shares = {}
        for js, (opts, batches), k in zip(jobs, built, picks):
            if k is not None:
                shares[js.name] = (opts[k][0], opts[k][1], batches[k])
        return Decision(place_shares(view, shares, best_fit))

    def _options(self, js, view: SchedView, perf: PerfModel, cap: dict[str, int]):
        """The job's (type, GPUs, score) options and the batch of each."""
        spec = view.cluster.spec
        per_type = []
        for t in cap:
            gpn = spec.max_gpus_per_node(t)
            v, b, ref = value_table(perf, js, t, cap[t], gpn, elastic=True)
            confs = configurations(gpn, cap[t])
            if js.job.num_gpus <= cap[t] and js.job.num_gpus not in confs:
                confs = sorted(confs + [js.job.num_gpus])  # the user's own size (rigid jobs need it)
            per_type.append((t, v, b, ref, confs))
        # normalise per job (as Sia does) by its best goodput on the fewest GPUs it runs on: one GPU
        # when it fits there; a job that needs sharding is normalised at its smallest feasible width
        one = _base_goodput(per_type)
        opts, batches = [], []
        cur = js.allocation
        for t, v, b, ref, confs in per_type:
            for n in confs:
                if not np.isfinite(v[n]):
                    continue
                val = v[n] * ref / one if one > 0 else v[n]
                score = self.lambda_n - max(val, 1e-6) ** self.p
                if cur is not None and (cur.gpu_type != t or cur.num_gpus != n):
                    score -= self.lambda_a
                opts.append((t, n, score))
                batches.append(None if js.job.rigid else int(b[n]))
        return opts, batches
