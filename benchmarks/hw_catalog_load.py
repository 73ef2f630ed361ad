"""Benchmark: loading the bundled SkyPilot v8 catalog (4 clouds, ~89k rows).

Prints, against baselines measured in the same run:
- in-process parse time of `load_catalog` (uncached) vs one plain `csv.DictReader` pass over the same files;
- cold `gpuwise catalog --json` wall time vs `python -c pass` (interpreter start-up).
Run: python benchmarks/hw_catalog_load.py [--repeat N]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import time

from _bench import best_time

from gpuwise.data import data_path
from gpuwise.hardware import catalog as catalog_mod


def _dictreader_pass() -> int:
    n = 0
    for cloud in ("aws", "azure", "gcp", "lambda"):
        with open(data_path("catalog", "v8", cloud, "vms.csv"), newline="") as fh:
            n += sum(1 for _ in csv.DictReader(fh))
    return n


def _load_uncached():
    catalog_mod._load.cache_clear()
    return catalog_mod.load_catalog(include_user=False)


def _run(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = _dictreader_pass()
    base = best_time(_dictreader_pass, args.repeat)
    load = best_time(_load_uncached, args.repeat)
    n_off = len(_load_uncached().offerings)
    print(f"rows in bundled files: {rows}; GPU offerings built: {n_off}")
    print(f"csv.DictReader pass (baseline): {base * 1000:.1f} ms")
    print(f"load_catalog (uncached):        {load * 1000:.1f} ms  ratio {load / base:.2f}x baseline")
    py = statistics.median(_run([sys.executable, "-c", "pass"]) for _ in range(args.repeat))
    cli = statistics.median(_run([sys.executable, "-m", "gpuwise", "catalog", "--no-user-catalog", "--json",
                                  "--gpu", "H100"]) for _ in range(args.repeat))
    print(f"python -c pass (baseline):      {py * 1000:.1f} ms")
    print(f"gpuwise catalog --gpu H100 --json: {cli * 1000:.1f} ms  ratio {cli / py:.2f}x baseline")


if __name__ == "__main__":
    main()
