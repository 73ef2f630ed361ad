"""Sia-style heterogeneous job streams for the policy benchmarks, generated from bundled data only.

Sia (SOSP'23) evaluates on Poisson arrivals of the Pollux applications on clusters of several GPU
types; its own workloads are held back (never read), so these streams resample the jobs
(application, requested GPUs, batch) of the eight bundled Pollux workloads with Poisson arrivals
at a stated rate. Seeded, so a run is reproducible; written as Pollux-format CSV.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from gpuwise.data import data_path


def pollux_job_pool() -> list[tuple[str, int, int]]:
    """(application, num_replicas, batch_size) of every job in the bundled Pollux workloads 1-8."""
    out = []
    for k in range(1, 9):
        with open(data_path("pollux", "workloads", f"workload-{k}.csv")) as f:
            out += [(r["application"], int(r["num_replicas"]), int(r["batch_size"])) for r in csv.DictReader(f)]
    return out


def sia_style_stream(path: Path, jobs: int, jobs_per_hour: float, seed: int) -> Path:
    """Write ``jobs`` jobs resampled from the Pollux pool with Poisson arrivals to ``path``."""
    rng = np.random.default_rng(seed)
    pool = pollux_job_pool()
    t = np.cumsum(rng.exponential(3600.0 / jobs_per_hour, jobs))
    pick = rng.integers(0, len(pool), jobs)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "time", "application", "num_replicas", "batch_size"])
        for i, (ti, k) in enumerate(zip(t, pick)):
            app, n, b = pool[k]
            w.writerow([f"{app}-{i}", int(ti), app, n, b])
    return path
