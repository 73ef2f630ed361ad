"""Per-job value of g GPUs: V_j(g) = max over allowed batches of goodput_j(g, b) / reference.

Elastic-scaling paper (MASCOTS'20, notes C.3): the value of k GPUs is the best throughput over
the feasible batch range, normalised so that different models are comparable. We normalise by
the goodput of the job's own request (its GPUs at its batch), or by its best value when the
request itself is infeasible, so V is "speed relative to what the user asked for" and the same
reference serves the elastic policy and its fixed-batch baseline.
"""

from __future__ import annotations

import numpy as np

from gpuwise.policies.base import JobState, PerfModel

BATCH_CANDIDATES = 12  # geometric grid over [b_min, b_max], as Pollux's optimizer does (it uses 50)


def batch_candidates(perf: PerfModel, js: JobState, gpu: str, elastic: bool) -> tuple[int, ...]:
    """Global batches a policy may choose for the job on ``gpu``."""
    job = js.job
    if job.rigid:
        return (0,)
    if not elastic:
        return (int(job.batch_size or perf.batch_range(job, gpu)[0]),)
    lo, hi, _ = perf.batch_range(job, gpu)
    grid = {int(round(b)) for b in np.geomspace(lo, hi, BATCH_CANDIDATES)}
    if job.batch_size and lo <= job.batch_size <= hi:
        grid.add(int(job.batch_size))
    return tuple(sorted(grid))


NORMALISATIONS = ("request", "job")


def value_table(perf: PerfModel, js: JobState, gpu: str, max_gpus: int, gpus_per_node: int,
                elastic: bool, normalise: str = "request") -> tuple[np.ndarray, np.ndarray, float]:
    """(V, best batch, reference goodput) for g = 0..max_gpus; V[g] = -inf where infeasible
    (V[0] = -inf: an admitted job gets at least one GPU).

    ``normalise="request"``: V = speed relative to the job's own request; ``"job"``: V = fraction of
    the whole job done per hour (favours jobs close to completion, like SRPT)."""
    batches = batch_candidates(perf, js, gpu, elastic)
    grid = perf.goodput_grid(js, gpu, max_gpus, gpus_per_node, batches)  # (G, B)
    best = grid.argmax(axis=1)
    good = grid[np.arange(grid.shape[0]), best]
    if normalise == "job":
        v = np.full(max_gpus + 1, -np.inf)
        v[1:] = np.where(good > 0, good * 3600.0, -np.inf)
        b = np.zeros(max_gpus + 1, dtype=np.int64)
        b[1:] = np.asarray(batches, dtype=np.int64)[best]
        return v, b, 1.0 / 3600.0
    ref = 0.0
    req = js.job.num_gpus
    if 1 <= req <= max_gpus:
        own = batch_candidates(perf, js, gpu, elastic=False)
        ref = float(perf.goodput_grid(js, gpu, req, gpus_per_node, own)[req - 1, 0]) if elastic else \
            float(grid[req - 1, 0])
    if ref <= 0:
        ref = float(good.max()) if good.max() > 0 else 1.0
    v = np.full(max_gpus + 1, -np.inf)
    v[1:] = np.where(good > 0, good / ref, -np.inf)
    b = np.zeros(max_gpus + 1, dtype=np.int64)
    b[1:] = np.asarray(batches, dtype=np.int64)[best]
    return v, b, ref
