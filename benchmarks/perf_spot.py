"""Benchmark: the spot model over many planner rows (gpuwise.estimate.preemption.spot_times).

Prints ratios against baselines measured in the same run:
1. spot_times on N rows (numpy, Poisson quantiles once per distinct mean count) vs a Python loop of
   the scalar spot_time over the same rows;
2. import of gpuwise.estimate.preemption vs import of scipy.stats (what the model used to import).
Run: python benchmarks/perf_spot.py
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from _bench import best_time
from gpuwise.errors import InputError
from gpuwise.estimate.preemption import spot_time, spot_times


def _rows(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    work = rng.choice([50.0, 200.0, 800.0], n) * 3600            # planner rows share work per GPU count
    rate = rng.choice([0.02, 0.05, 0.1, 0.2], n)
    nodes = rng.choice([1, 2, 4, 8], n)
    ckpt = rng.choice([30.0, 120.0, 600.0], n)
    return work, rate, nodes, ckpt, np.full(n, 300.0)


def main() -> None:
    n = 5000
    work, rate, nodes, ckpt, restart = _rows(n)

    def loop():
        for i in range(n):
            try:
                spot_time(work[i], rate[i], int(nodes[i]), ckpt[i], restart[i])
            except InputError:
                pass

    t_vec = best_time(lambda: spot_times(work, rate, nodes, ckpt, restart, deadline_s=work * 1.5))
    t_loop = best_time(loop, 1)
    print(f"spot model on {n} rows: vectorised {t_vec * 1e3:.1f} ms, scalar loop {t_loop * 1e3:.1f} ms, "
          f"ratio {t_loop / t_vec:.1f}x")

    def imp(mod: str) -> float:
        code = f"import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"
        return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                        check=True).stdout) for _ in range(3))

    t_pre, t_sci = imp("gpuwise.estimate.preemption"), imp("scipy.stats")
    print(f"import: gpuwise.estimate.preemption {t_pre * 1e3:.0f} ms, scipy.stats {t_sci * 1e3:.0f} ms, "
          f"ratio {t_sci / t_pre:.1f}x")


if __name__ == "__main__":
    main()
