"""Simulator speed: Pollux workload-6 with the elastic DP (target < 60 s) and the 82k-job Philly
trace with FIFO (target < 120 s), each as a ratio against its budget and against the time to
read its workload measured in the same run (the floor any simulator pays)."""

from __future__ import annotations

import time

from gpuwise.data import data_path
from gpuwise.hardware.cluster import load_cluster, pollux_cluster
from gpuwise.policies.registry import make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import load_workload


def bench(label, cluster, path, policy, budget):
    t0 = time.perf_counter()
    w = load_workload(path)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = summarise(simulate(cluster, w, make_policy(policy)))
    sim = time.perf_counter() - t0
    print(f"{label}: {len(w)} jobs, {m['events']} events, simulated in {sim:.2f} s "
          f"({sim / budget:.3f} of the {budget:.0f} s budget: {'OK' if sim < budget else 'MISSED'}); "
          f"{sim / max(load, 1e-9):.1f}x the workload read time ({load:.2f} s); "
          f"{m['jobs_completed']} completed, mean JCT {m['mean_jct_s'] / 3600:.2f} h")


def main() -> None:
    bench("Pollux workload-6, elastic-dp, 16x4 T4", pollux_cluster(),
          data_path("pollux", "workloads", "workload-6.csv"), "elastic-dp", 60.0)
    bench("Philly 82k jobs, fifo, 64x8 V100", load_cluster("examples/clusters/philly-512.yaml"),
          data_path("pollux", "traces", "philly.csv"), "fifo", 120.0)


if __name__ == "__main__":
    main()
