"""The runtime's `Clock`: wall-clock seconds since the run started (continued across a resume)."""

from __future__ import annotations

import heapq
import math
import time


class WallClock:
    def __init__(self, offset_s: float = 0.0) -> None:
        self._t0 = time.monotonic() - offset_s
        self._wakes: list[tuple[float, int, str]] = []
        self._seq = 0

    def now(self) -> float:
        return time.monotonic() - self._t0

    def wake_at(self, at: float, kind: str) -> None:
        self._seq += 1
        heapq.heappush(self._wakes, (at, self._seq, kind))

    def due(self, now: float) -> list[str]:
        out = []
        while self._wakes and self._wakes[0][0] <= now:
            out.append(heapq.heappop(self._wakes)[2])
        return out

    def next_at(self) -> float:
        return self._wakes[0][0] if self._wakes else math.inf
