"""Per-job value of g GPUs: V_j(g) = max over allowed batches of goodput_j(g, b) / reference.

Elastic-scaling paper (MASCOTS'20, notes C.3): the value of k GPUs is the best throughput over
the feasible batch range, normalised so that different models are comparable. The paper does not
publish the normalisation, so it is an option (`OBJECTIVES`); every one divides goodput (fraction
of the job per second) by a per-job reference that is the same for the elastic policy and its
fixed-batch baseline.
"""

from __future__ import annotations

import numpy as np

from gpuwise.policies.base import JobState, PerfModel

from gpuwise.estimate.job_space import batch_grid


def batch_candidates(perf: PerfModel, js: JobState, gpu: str, elastic: bool) -> tuple[int, ...]:
    """Global batches a policy may choose for the job on ``gpu``."""
    job = js.job
    if job.rigid:
        return (0,)
    if not elastic:
        return (int(job.batch_size or perf.batch_range(job, gpu)[0]),)
    lo, hi, _ = perf.batch_range(job, gpu)
    if lo < 1 or hi < lo:
        return ()  # no batch range on this type: the job does not fit it
    grid = set(batch_grid(lo, hi))   # the one global-batch grid (the planner's and `estimate`'s)
    if job.batch_size and lo <= job.batch_size <= hi:
        grid.add(int(job.batch_size))
    return tuple(sorted(grid))


# V_j(g) objectives of the elastic DP (papers.md C.3/C.4 leave the paper's normalisation open).
# Pollux workload-6 at 4x load (examples/workloads/pollux-w6-4x-load.csv), drop admission, elastic vs
# fixed-batch DP with the same objective: jobs completed / mean JCT h / mean JCT h over the jobs both
# complete -- job 155 vs 75 / 0.88 vs 0.49 / 0.46 vs 0.50 (the default: most completions, best
# like-for-like); remaining 148 vs 72 / 0.94 vs 0.58 / 0.56 vs 0.61; request 151 vs 72 / 0.92 vs 0.56 /
# 0.50 vs 0.52; speedup 147 vs 73 / 0.94 vs 0.56 / 0.58 vs 0.56.
# No objective lowers the mean over *all* completions with the workload's own (top-of-range)
# batches: the elastic DP also finishes the long ImageNet/BERT jobs the baseline drops;
# benchmarks/sched_elastic_load.py maps where it does (mid-range batches, 16x load and above).
OBJECTIVES = {
    # fraction of the whole job done per hour: weights goodput by 1/job size (short jobs first)
    "job": "fraction of the whole job done per hour (goodput / job size)",
    # fraction of the *remaining* work done per hour: SRPT-like, 1/remaining-work weighting
    "remaining": "fraction of the job's remaining work done per hour (goodput / remaining work, SRPT-like)",
    # goodput relative to the user's own request (its GPUs at its batch)
    "request": "goodput relative to the job's own request (its GPUs at its batch)",
    # goodput relative to the job's best goodput on its base count: a speedup, the notes' natural choice
    "speedup": "speedup over the job's best goodput on the fewest GPUs it runs on (one GPU if it fits)",
}
DEFAULT_OBJECTIVE = "job"


def value_table(perf: PerfModel, js: JobState, gpu: str, max_gpus: int, gpus_per_node: int,
                elastic: bool, objective: str = DEFAULT_OBJECTIVE) -> tuple[np.ndarray, np.ndarray, float]:
    """(V, best batch, reference goodput) for g = 0..max_gpus; V[g] = -inf where infeasible
    (V[0] = -inf: an admitted job gets at least one GPU). ``objective``: a key of `OBJECTIVES`;
    the reference is what goodput (fraction of the job per second) is divided by."""
    batches = batch_candidates(perf, js, gpu, elastic)
    if not batches:  # the job does not fit this type: no count is feasible
        return np.full(max_gpus + 1, -np.inf), np.zeros(max_gpus + 1, dtype=np.int64), 1.0
    grid = perf.goodput_grid(js, gpu, max_gpus, gpus_per_node, batches)  # (G, B)
    best = grid.argmax(axis=1)
    good = grid[np.arange(grid.shape[0]), best]
    b = np.zeros(max_gpus + 1, dtype=np.int64)
    b[1:] = np.asarray(batches, dtype=np.int64)[best]
    if objective == "job":
        ref = 1.0 / 3600.0
    elif objective == "remaining":  # floor: a job about to finish must not get an unbounded value
        ref = max(1.0 - js.fraction_done, 1e-3) / 3600.0
    elif objective == "speedup":
        # base: the fewest GPUs the job runs on (one GPU when its smallest batch fits there), so a
        # job that needs 2 GPUs has speedup 1 on 2, like every other job at its own base
        ref = float(good[np.flatnonzero(good > 0)[0]]) if (good > 0).any() else 0.0
    elif objective == "request":
        ref = 0.0
        req = js.job.num_gpus
        if 1 <= req <= max_gpus:
            own = batch_candidates(perf, js, gpu, elastic=False)
            ref = float(perf.goodput_grid(js, gpu, req, gpus_per_node, own)[req - 1, 0]) if elastic else \
                float(grid[req - 1, 0])
    else:
        raise ValueError(f"unknown objective {objective!r}")
    if ref <= 0:  # the reference itself is infeasible: normalise by the job's best value
        ref = float(good.max()) if good.max() > 0 else 1.0
    v = np.full(max_gpus + 1, -np.inf)
    v[1:] = np.where(good > 0, good / ref, -np.inf)
    return v, b, ref
