"""Benchmark: JobModel batch optimisation (what the planner and simulator call most).

Prints ratios against baselines measured in the same run:
1. best_batch (vectorised over all local-batch x accumulation candidates) vs the same search as a
   scalar Python loop calling the Pollux predict() once per candidate;
2. a 1-64 GPU speedup table from a warm JobModel (memoised best_batch) vs a fresh model per query.
Run: python benchmarks/perf_job_model.py
"""

from __future__ import annotations

import math

import numpy as np

from _bench import best_time
from gpuwise.estimate.job_model import JobModel
from gpuwise.estimate.fits import predict


def scalar_best(jm: JobModel, gpus: int) -> float:
    reps = jm.replicas(gpus)
    nodes = jm.nodes_for(gpus)
    best = -1.0
    grid = np.unique(np.round(np.geomspace(1, jm.max_local_bsz, 48)).astype(int))
    for a in range(1, jm.max_accum + 1):          # a = micro-steps per optimizer step
        per = reps * a
        lo, hi = max(1, math.ceil(jm.min_batch / per)), min(jm.max_local_bsz, jm.max_batch // per)
        for b in sorted({lo, hi, *[int(x) for x in grid if lo <= x <= hi]}):
            if lo > hi:
                continue
            st, _ = predict(jm.step_source.params, nodes, reps, b, a)
            gb = per * b
            best = max(best, gb / st * float(jm.efficiency(gb)))
    return best


def main() -> None:
    jm = JobModel.for_pollux_app("imagenet")
    gpus = [1, 2, 4, 8, 16, 32, 64]

    def vec():
        for g in gpus:
            jm._cache.clear()
            jm.best_batch(g)

    def loop():
        for g in gpus:
            scalar_best(jm, g)

    for g in gpus:  # same answer
        jm._cache.clear()
        assert abs(jm.best_batch(g).goodput - scalar_best(jm, g)) <= 1e-9 * scalar_best(jm, g)
    t_vec, t_loop = best_time(vec), best_time(loop)
    print(f"best_batch over {len(gpus)} GPU counts: vectorised {t_vec * 1e3:.2f} ms, scalar loop "
          f"{t_loop * 1e3:.2f} ms -> {t_loop / t_vec:.1f}x faster")

    jm._cache.clear()
    [jm.speedup(g) for g in gpus]

    def warm():
        for _ in range(100):
            for g in gpus:
                jm.speedup(g)

    fresh = JobModel(jm.step_source, jm.noise, jm.min_batch, jm.max_batch, jm.max_local_bsz, jm.gpus_per_node)

    def cold():
        for _ in range(100):
            for g in gpus:
                fresh._cache.clear()
                fresh.speedup(g)

    t_warm, t_cold = best_time(warm), best_time(cold)
    print(f"speedup table x100: memoised {t_warm * 1e3:.2f} ms, recomputed {t_cold * 1e3:.2f} ms -> "
          f"{t_cold / t_warm:.0f}x faster")


if __name__ == "__main__":
    main()
