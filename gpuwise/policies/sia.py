"""Sia (Jayaram Subramanya et al., SOSP'23; peers.md section 4): heterogeneity-aware goodput ILP.

Each round (every ``interval_s``, and on arrivals/completions no more often) every active job gets
a goodput per (GPU type, configuration) from the `PerfModel` -- its best goodput over its batch
range at that count -- normalised by the job's best one-GPU goodput over all types (so V >= ~1
where scaling helps; on the fewest GPUs it runs on where its smallest batch does not fit one).
Configurations are Sia's: 1, 2, 4, ... GPUs inside a node, then whole nodes
(`knapsack.configurations`), placed by `whole_node_fit`. A running job's goodput at any other
configuration is multiplied by the restart factor of `pollux.restart_factor` (the share of its
life it would still have worked after one more restart). The round solves, with HiGHS
(`scipy.optimize.milp`), the binary program

    maximise  sum_jc x_jc * (lambda_n - V_jc^p) - lambda_a * x_jc * [c is not the job's current one]
    s.t.      sum_c x_jc <= 1 per job;   sum_jc gpus_c * x_jc <= capacity_t per GPU type t

(p = -0.5, lambda_n = 1.1, lambda_a = 0.01: Sia's defaults). `enumerate_assignment` is the
exhaustive reference the tests compare the ILP with.
"""

from __future__ import annotations

import itertools

import numpy as np

from gpuwise.policies.base import Decision, JobState, PerfModel, Policy, SchedView
from gpuwise.policies.knapsack import configurations
from gpuwise.policies.placement import place_shares, whole_node_fit
from gpuwise.policies.pollux import restart_factor
from gpuwise.policies.solver import FALLBACK_RULE, Option, SolverLog, solve_assignment
from gpuwise.policies.value import value_table

__all__ = ["Sia", "enumerate_assignment", "solve_assignment"]


def enumerate_assignment(options: list[list[Option]], capacity: dict[str, int]) -> float:
    """Best summed score by trying every choice (tests only: exponential)."""
    best = 0.0
    for pick in itertools.product(*[[None, *range(len(o))] for o in options]):
        used = dict.fromkeys(capacity, 0)
        for opts, k in zip(options, pick):
            if k is not None:
                used[opts[k][0]] += opts[k][1]
        if all(used[t] <= capacity[t] for t in capacity):
            best = max(best, sum(opts[k][2] for opts, k in zip(options, pick) if k is not None))
    return best


def _base_goodput(goods: list[np.ndarray]) -> float:
    """The job's best goodput over types on one GPU, or on the fewest GPUs it runs on where its
    smallest batch needs more than one (0 if it runs nowhere): what Sia's scores are relative to."""
    for n in range(1, max((len(g) for g in goods), default=1)):
        vals = [float(g[n]) for g in goods if n < len(g) and np.isfinite(g[n]) and g[n] > 0]
        if vals:
            return max(vals)
    return 0.0


class Sia(Policy):
    name = "sia"
    needs_progress = True

    def __init__(self, p: float = -0.5, lambda_n: float = 1.1, lambda_a: float = 0.01,
                 interval_s: float = 60.0, restart_s: float = 30.0, time_limit_s: float = 10.0):
        self.p, self.lambda_n, self.lambda_a = float(p), float(lambda_n), float(lambda_a)
        self.min_interval_s = self.period_s = float(interval_s)  # Sia's round length
        self.restart_s = float(restart_s)      # rescale delay the restart factor assumes
        self.time_limit_s = float(time_limit_s)  # HiGHS limit per round
        self.node_limit: int | None = None       # HiGHS branch-and-bound nodes per round (None: none)
        self.solver = SolverLog()                # HiGHS's outcome of every round

    def describe(self) -> list[str]:
        return [f"sia: binary program over job x (GPU type, configuration) solved by HiGHS every "
                f"{self.min_interval_s:g} s, p={self.p:g}, lambda_n={self.lambda_n:g}, lambda_a={self.lambda_a:g}, "
                f"restart factor (age - restarts x {self.restart_s:g} s)/(age + {self.restart_s:g} s) on "
                "changed configurations; 1, 2, 4 GPUs in a node or whole nodes",
                f"sia: HiGHS time limit {self.time_limit_s:g} s per round; {FALLBACK_RULE}"]

    def job_options(self, js: JobState, now: float, view: SchedView,
                    perf: PerfModel) -> tuple[list[Option], list[int | None]]:
        """The job's (type, GPUs, score) options and the batch of each."""
        spec = view.cluster.spec
        tables = []
        for t in spec.gpu_types:
            cap, gpn = spec.gpus_of_type(t), spec.max_gpus_per_node(t)
            v, b, ref = value_table(perf, js, t, cap, gpn, elastic=True, objective="job")
            confs = set(configurations(gpn, cap))
            if js.job.rigid and js.job.num_gpus <= cap:
                confs.add(js.job.num_gpus)
            tables.append((t, v * ref, b, sorted(confs)))
        one = _base_goodput([good for _, good, _, _ in tables])
        cur = js.allocation
        factor = restart_factor(js, now, self.restart_s) if cur is not None else 1.0
        opts, batches = [], []
        for t, good, b, confs in tables:
            for n in confs:
                if not np.isfinite(good[n]) or good[n] <= 0:
                    continue
                moved = cur is not None and (cur.gpu_type != t or cur.num_gpus != n)
                val = good[n] / one if one > 0 else 1.0
                val = max(val * (factor if moved else 1.0), 1e-6)
                opts.append((t, n, self.lambda_n - val ** self.p - (self.lambda_a if moved else 0.0)))
                batches.append(None if js.job.rigid else (cur.batch_size if cur is not None and not moved
                                                          else int(b[n])))
        return opts, batches

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        jobs = view.active()
        if not jobs:
            return Decision()
        built = [self.job_options(js, now, view, perf) for js in jobs]
        picks = solve_assignment([o for o, _ in built], view.cluster.capacity_by_type(), self.time_limit_s,
                                 self.solver, self.node_limit)
        shares = {}
        for js, (opts, batches), k in zip(jobs, built, picks):
            if k is not None:
                shares[js.name] = (opts[k][0], opts[k][1], batches[k])
        return Decision(place_shares(view, shares, whole_node_fit))
