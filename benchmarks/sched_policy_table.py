"""The policy table (issue 13): every registered policy on the eight bundled Pollux workloads, on
the Pollux testbed (16 x 4 T4) and on examples/clusters/hetero-t4-v100-a100.yaml (96 GPUs, three
types). Prints, per cluster, each policy's mean JCT per workload and, summed over the eight, the
mean/median/p99 JCT, makespan, GPU-hours, completed/dropped jobs and mean decision time per round;
then each policy's mean JCT as a ratio over pollux's on the same workloads (same run).

Run: PYTHONPATH=$PWD nice -n 10 python benchmarks/sched_policy_table.py [--workloads 6]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpuwise.data import data_path
from gpuwise.hardware.cluster import load_cluster, pollux_cluster
from gpuwise.policies.registry import POLICIES, make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import load_workload


def run_cluster(cluster, workloads: list[int]) -> None:
    print(f"\n{cluster.name} ({cluster.describe()}), Pollux workloads {workloads}")
    rows = {}
    for name in POLICIES:
        ms = []
        for k in workloads:
            w = load_workload(data_path("pollux", "workloads", f"workload-{k}.csv"))
            c0 = time.process_time()
            ms.append(summarise(simulate(cluster, w, make_policy(name))))
            ms[-1]["cpu_s"] = time.process_time() - c0
        rows[name] = ms
        per = " ".join(f"{m['mean_jct_s'] / 3600:5.2f}" if m["mean_jct_s"] else "  -  " for m in ms)
        agg = lambda key: np.mean([m[key] for m in ms if m[key] is not None])  # noqa: E731
        print(f"  {name:24s} mean JCT h per workload [{per}] | mean {agg('mean_jct_s') / 3600:.2f} h, median "
              f"{agg('median_jct_s') / 3600:.2f} h, p99 {agg('p99_jct_s') / 3600:.2f} h, makespan "
              f"{agg('makespan_s') / 3600:.1f} h, {agg('gpu_hours'):.0f} GPU-h, completed "
              f"{sum(m['jobs_completed'] for m in ms)}, dropped {sum(m['jobs_dropped'] for m in ms)}, decision "
              f"{agg('mean_decision_ms'):.2f} ms/round, sim {sum(m['cpu_s'] for m in ms):.0f} s CPU", flush=True)
    ref = [m["mean_jct_s"] for m in rows["pollux"]]
    print("  mean JCT / pollux's (geometric mean over workloads):")
    for name, ms in rows.items():
        r = [m["mean_jct_s"] / b for m, b in zip(ms, ref) if m["mean_jct_s"]]
        print(f"    {name:24s} {np.exp(np.mean(np.log(r))):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    args = ap.parse_args()
    ks = [int(k) for k in args.workloads.split(",")]
    run_cluster(pollux_cluster(), ks)
    run_cluster(load_cluster("examples/clusters/hetero-t4-v100-a100.yaml"), ks)


if __name__ == "__main__":
    main()
