"""Start-up time of `gpuwise memory` against `python -c pass` (same machine, same run).

Prints the median wall time of each over N runs and their ratio. `gpuwise memory` must answer
in well under a second: lazy imports keep numpy/scipy/pydantic out of its path.
Usage: python benchmarks/mem_startup.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "gpuwise memory --json": [sys.executable, "-m", "gpuwise", "memory", "llama-3.1-70b", "--gpus", "64", "--tp", "8",
                              "--pp", "2", "--zero", "1", "--json"],
    "gpuwise memory (table)": [sys.executable, "-m", "gpuwise", "memory", "llama-3.1-8b", "--gpus", "8", "--zero", "3"],
    "gpuwise fit-gpus --json": [sys.executable, "-m", "gpuwise", "fit-gpus", "llama-3.1-70b", "--json"],
}


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    results = {}
    for name, cmd in CASES.items():
        timed(cmd)                                  # warm the file cache
        results[name] = statistics.median(timed(cmd) for _ in range(n))
    base = results["python -c pass"]
    print(f"{'command':28s} {'median s':>9s} {'x python -c pass':>17s}")
    for name, t in results.items():
        print(f"{name:28s} {t:9.3f} {t / base:17.1f}")
    check = results["gpuwise memory --json"]
    print(f"gpuwise memory --json answers in {check:.3f} s ({'under' if check < 1 else 'OVER'} one second)")


if __name__ == "__main__":
    main()
