"""Scavenger online search vs the oracle on synthetic ground truths from the Pollux profiles.

Prints, per application and objective, the search's total time and cost relative to the oracle
(which runs the truly best configuration from the start with no search), for partial search
(profiles the extremes), full search and partial search without an earlier run's noise curve.
Scavenger reports +13% time / +9% cost for partial search (CCGrid'23 Sec. V-B).

    python benchmarks/plan_online_search.py
"""

from __future__ import annotations

import time

import numpy as np

from gpuwise.validation.scavenger_search import GroundTruthJob, demo

APPS = ("imagenet", "yolov3", "deepspeech2", "bert", "cifar10")


def main() -> None:
    print(f"{'app':12} {'objective':9} {'mode':14} {'profiled':>8} {'oracle h':>9} {'chosen=oracle':>13} "
          f"{'time/oracle':>11} {'cost/oracle':>11} {'median err':>10} {'wall ms':>8}")
    for app in APPS:
        truth = GroundTruthJob(app, noise=0.0)
        for objective in ("knee", "time", "cost"):
            for mode, kw in (("partial", {}), ("full", {"mode": "full"}),
                             ("partial,no-prior", {"use_prior": False})):
                t0 = time.perf_counter()
                d = demo(app, objective, **kw)
                ms = (time.perf_counter() - t0) * 1e3
                r, o = d.result, d.overhead
                t = np.array([truth.true_time(c, 0.0) for c in r.configs])
                err = float(np.median(np.abs(r.predicted_time_s / t - 1)))
                print(f"{app:12} {objective:9} {mode:14} {len(r.profiled):>4}/{len(r.configs):<3} "
                      f"{o.oracle_time_s / 3600:9.2f} {str(r.chosen == o.oracle):>13} "
                      f"{1 + o.time_overhead:11.3f} {1 + o.cost_overhead:11.3f} {err:10.1%} {ms:8.0f}")
    print("Scavenger (paper): partial search 1.13 x oracle time, 1.09 x oracle cost")


if __name__ == "__main__":
    main()
