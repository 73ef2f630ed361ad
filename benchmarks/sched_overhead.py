"""Scheduling overhead: Frenzy's plan-and-place vs the MILP (Sia-style) allocator, mean decision
time per round on the same workload (Pollux workload-6) and clusters of 64 and 96 GPUs.
Target (Frenzy's claim, papers.md E.5): Frenzy at least 10x below the MILP; aim 100x."""

from __future__ import annotations

from gpuwise.data import data_path
from gpuwise.hardware.cluster import load_cluster, pollux_cluster
from gpuwise.policies.registry import make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import load_workload


def main() -> None:
    w = load_workload(data_path("pollux", "workloads", "workload-6.csv"))
    for cluster in (pollux_cluster(), load_cluster("examples/clusters/hetero-t4-v100-a100.yaml")):
        m = {p: summarise(simulate(cluster, w, make_policy(p))) for p in ("frenzy", "milp", "first-fit")}
        fr, mi = m["frenzy"]["mean_decision_ms"], m["milp"]["mean_decision_ms"]
        print(f"{cluster.name} ({cluster.total_gpus} GPUs): frenzy {fr:.3f} ms/round (p99 {m['frenzy']['p99_decision_ms']:.3f}), "
              f"milp {mi:.2f} ms/round (p99 {m['milp']['p99_decision_ms']:.2f}) "
              f"-> milp/frenzy = {mi / fr:.0f}x ({'OK' if mi / fr >= 10 else 'MISSED'} >= 10x); mean JCT h: "
              + ", ".join(f"{p} {v['mean_jct_s'] / 3600:.2f}" for p, v in m.items()))


if __name__ == "__main__":
    main()
