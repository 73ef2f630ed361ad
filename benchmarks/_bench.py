"""Shared helper of the benchmark scripts (run as `python benchmarks/NAME.py`, so this folder is on
sys.path): the timing rule every ratio is built on."""

from __future__ import annotations

import time
from typing import Callable


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` in seconds (the minimum is the least noisy)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
