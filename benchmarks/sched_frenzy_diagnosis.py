"""Frenzy vs the optimisers on heterogeneous streams (issue 13), and why the old Frenzy lost.

Sia-style streams (`_streams.sia_style_stream`: 120 jobs resampled from the bundled Pollux
workloads, Poisson arrivals at 40 and 120 jobs/h, seeds 1-4) on examples/clusters/hetero-t4-v100-a100.yaml
(96 GPUs, three types). For each stream: mean JCT of sia and milp, then Frenzy and Frenzy with one
rule switched off, as a ratio over the better optimiser's mean JCT in the same run (target <= 1.1),
and the optimiser's mean decision time over Frenzy's (target >= 10x, aim 100x).

Run: PYTHONPATH=$PWD nice -n 10 python benchmarks/sched_frenzy_diagnosis.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from _streams import sia_style_stream
from gpuwise.hardware.cluster import load_cluster
from gpuwise.policies.frenzy import Frenzy
from gpuwise.policies.registry import make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import load_workload

VARIANTS = {
    "frenzy": {},
    "no rescaling (rules 3-4 off)": {"rescale": False},
    "no fair share (rules 2-3 off)": {"share": False},
    "user's batch (rule 1 off)": {"model_batch": False},
    "plans rated at arrival only": {"stages": 1},
}


def main() -> None:
    cluster = load_cluster("examples/clusters/hetero-t4-v100-a100.yaml")
    ratios = {k: [] for k in VARIANTS}
    speed = []
    tmp = Path(tempfile.mkdtemp())
    for rate in (40.0, 120.0):
        for seed in (1, 2, 3, 4):
            w = load_workload(sia_style_stream(tmp / f"s{rate:g}-{seed}.csv", 120, rate, seed))
            opt = {p: summarise(simulate(cluster, w, make_policy(p))) for p in ("sia", "milp")}
            best = min(opt.values(), key=lambda m: m["mean_jct_s"])
            row = [f"{rate:g} jobs/h seed {seed}: sia {opt['sia']['mean_jct_s']:.0f} s, milp {opt['milp']['mean_jct_s']:.0f} s"]
            for k, kw in VARIANTS.items():
                m = summarise(simulate(cluster, w, Frenzy(**kw)))
                ratios[k].append(m["mean_jct_s"] / best["mean_jct_s"])
                row.append(f"{k} {ratios[k][-1]:.2f}x")
                if k == "frenzy":
                    speed.append(best["mean_decision_ms"] / m["mean_decision_ms"])
                    row.append(f"decides {speed[-1]:.0f}x faster ({m['mean_decision_ms']:.2f} vs "
                               f"{best['mean_decision_ms']:.1f} ms)")
            print("; ".join(row), flush=True)
    print("mean JCT over the better optimiser's (geometric mean, worst):")
    for k, r in ratios.items():
        print(f"  {k:32s} {np.exp(np.mean(np.log(r))):.2f}x  worst {max(r):.2f}x"
              + ("  (target <= 1.1x: " + ("OK" if max(r) <= 1.1 else "MISSED") + ")" if k == "frenzy" else ""))
    print(f"decision time, optimiser / frenzy: median {np.median(speed):.0f}x, min {min(speed):.0f}x "
          f"(target >= 10x: {'OK' if min(speed) >= 10 else 'MISSED'}; aim 100x)")


if __name__ == "__main__":
    main()
