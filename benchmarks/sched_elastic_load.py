"""Elastic DP vs its fixed-batch baseline under drop admission, across offered load and the users'
choice of fixed batch.

Saxena et al. (MASCOTS'20) report, against a baseline that rescales GPU counts but never the
batch, "up to ~2x jobs completed" and "up to ~10x lower mean JCT". This sweep shows where each
relation holds on the Pollux testbed (16 x 4 T4) with Pollux workload-6, every arrival time
divided by the load factor (`gpuwise.workload.transforms.at_load`; the 4x stream is
examples/workloads/pollux-w6-4x-load.csv), and the batch the fixed-batch baseline runs at either
as the workload gives it (Pollux picked the top of each application's range: 384 for BERT, 3200-6400
for ImageNet) or moved to a point of the validated range on a log scale (0 = smallest, 0.5 =
geometric middle: examples/workloads/pollux-w6-midbatch.csv). The elastic policy picks its own
batch in the range either way.

Printed per (batch, load): jobs completed by each (and the ratio), mean JCT over all jobs each
completes (and the ratio), mean JCT over the jobs *both* complete (like-for-like), and whether both
relations of the issue hold (clearly more completions, >= 1.5x, and a lower mean JCT); then the
per-application mean JCTs at the highest load for the workload's own batches.
Run: ``python benchmarks/sched_elastic_load.py [--loads 1,4,8,16,32] [--positions own,0,0.5]``.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from gpuwise.data import data_path
from gpuwise.hardware.cluster import pollux_cluster
from gpuwise.policies.elastic_dp import ElasticDP
from gpuwise.sim.cluster import simulate
from gpuwise.sim.metrics import common_jct, series
from gpuwise.workload.traces import load_workload
from gpuwise.workload.transforms import at_load, with_batch_position


def by_app(res) -> dict[str, tuple[int, float]]:
    out = collections.defaultdict(list)
    for js in res.jobs:
        if js.status == "done":
            out[js.job.application].append((js.finish_s - js.submitted_s) / 3600)
    return {a: (len(v), float(np.mean(v))) for a, v in sorted(out.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="1,4,8,16,32", help="comma-separated load factors (default 1,4,8,16,32)")
    ap.add_argument("--positions", default="own,0,0.5",
                    help="users' fixed batch: 'own' (the workload's) or a point of the validated range "
                         "on a log scale (default own,0,0.5)")
    args = ap.parse_args()
    base = load_workload(str(data_path("pollux", "workloads", "workload-6.csv")))
    t0 = time.perf_counter()
    last = None
    held = 0
    for pos in args.positions.split(","):
        w0 = base if pos == "own" else with_batch_position(base, float(pos))
        label = "workload's own batches" if pos == "own" else f"batch at {pos} of the validated range"
        print(f"\nfixed batch: {label}")
        print("  load | completed elastic/fixed (ratio) | mean JCT h, all completed (ratio) | "
              "mean JCT h, jobs both complete (n, ratio) | both relations")
        for f in (float(x) for x in args.loads.split(",")):
            w = at_load(w0, f)
            el = simulate(pollux_cluster(), w, ElasticDP(elastic=True, admission="drop"))
            fx = simulate(pollux_cluster(), w, ElasticDP(elastic=False, admission="drop"))
            je, jf = series(el)["jct_by_job"], series(fx)["jct_by_job"]
            me, mf = np.mean(list(je.values())) / 3600, np.mean(list(jf.values())) / 3600
            n, common = common_jct({"el": je, "fx": jf})
            ce, cf = common["el"] / 3600, common["fx"] / 3600
            both = len(je) >= 1.5 * len(jf) and me < mf
            held += both
            print(f"  {f:4g}x | {len(je):3d} / {len(jf):3d} ({len(je) / len(jf):.2f}x) | "
                  f"{me:.2f} / {mf:.2f} ({me / mf:.2f}x) | {ce:.2f} / {cf:.2f} (n={n}, {ce / cf:.2f}x) | "
                  f"{'yes' if both else 'no'}")
            if pos == "own":
                last = (f, el, fx)
    if last is not None:
        f, el, fx = last
        print(f"\nper application at {f:g}x load, workload's own batches: completed, mean JCT h (elastic | fixed)")
        be, bf = by_app(el), by_app(fx)
        for app in sorted(set(be) | set(bf)):
            e, x = be.get(app, (0, float("nan"))), bf.get(app, (0, float("nan")))
            print(f"  {app:12s} {e[0]:3d} {e[1]:6.2f} | {x[0]:3d} {x[1]:6.2f}")
    print(f"\nboth relations (>= 1.5x completions and lower mean JCT) hold in {held} settings")
    print(f"{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
