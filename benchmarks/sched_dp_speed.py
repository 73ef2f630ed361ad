"""Elastic DP decision time: 500 jobs on 1,024 GPUs (target: under one second).

Jobs are the Pollux workload-6 applications and batches repeated (progress spread over their
training), on 256 nodes x 4 T4. Prints the full policy decision (value tables + DP + placement)
and the DP alone, as ratios against a plain-Python DP measured in the same run on the same
instance (timed on the first jobs and scaled linearly per job).
"""

from __future__ import annotations

import time

import numpy as np

from gpuwise.data import data_path
from gpuwise.hardware.cluster import make_cluster
from gpuwise.policies.base import ClusterState, JobState, SchedView
from gpuwise.policies.dp import dp_allocate, useful_cap
from gpuwise.policies.elastic_dp import ElasticDP
from gpuwise.policies.value import value_table
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.workload.traces import load_workload


def python_dp(values, K):
    P = [0.0] * (K + 1)
    for v in values:
        G = min(useful_cap(v), K)
        new = [-float("inf")] * (K + 1)
        for k in range(K + 1):
            best = -float("inf")
            for g in range(1, min(k, G) + 1):
                c = v[g] + P[k - g]
                if c > best:
                    best = c
            new[k] = best
        P = new
    return P[K]


def main() -> None:
    K, J = 1024, 500
    cluster = make_cluster([("T4", K // 4, 4)])
    base = load_workload(data_path("pollux", "workloads", "workload-6.csv")).jobs
    perf = GroundTruthPerf()
    rng = np.random.default_rng(0)
    pending = {}
    for i in range(J):
        j = base[i % len(base)]
        j = type(j)(**{**j.__dict__, "name": f"{j.name}-{i}"})
        js = JobState(job=j, submitted_s=0.0, target=perf.target(j))
        js.progress = float(rng.uniform(0, 0.9)) * js.target
        pending[j.name] = js
    view = SchedView(pending, {}, ClusterState(cluster), list(pending))
    policy = ElasticDP(elastic=True, admission="queue")
    policy.schedule(0.0, view, perf)  # warm the per-application throughput caches
    t0 = time.perf_counter()
    decision = policy.schedule(0.0, view, perf)
    full = time.perf_counter() - t0
    tables = [value_table(perf, js, "T4", K, 4, True, "job")[0] for js in pending.values()]
    t0 = time.perf_counter()
    total, gs, idx = dp_allocate(tables, K)
    n = len(idx)
    dp = time.perf_counter() - t0
    sub = 10
    t0 = time.perf_counter()
    python_dp(tables[:sub], K)
    py = (time.perf_counter() - t0) * n / sub
    print(f"elastic-dp decision, {J} jobs on {K} GPUs: {full:.3f} s (target < 1 s: "
          f"{'OK' if full < 1 else 'MISSED'}), {sum(a is not None for a in decision.allocations.values())} jobs placed")
    print(f"DP alone: {dp:.3f} s for {n} jobs; plain-Python DP (same instance, scaled from {sub} jobs): "
          f"{py:.1f} s -> numpy speed-up {py / dp:.0f}x")


if __name__ == "__main__":
    main()
