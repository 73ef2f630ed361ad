"""The discrete-event core shared by every simulator in gpuwise.

A clock and a binary heap of events ``(time, seq, kind, payload)``. ``seq`` breaks ties in
insertion order so runs are reproducible. Cancellation is lazy: a cancelled event stays in the
heap and is skipped when popped, which keeps `schedule` and `cancel` O(log n) and O(1).
Handlers are plain callables looked up by ``kind`` so that a simulator's hot loop is a heap pop
and one dict lookup (10^6 jobs simulate in seconds).
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Callable, Mapping


class Engine:
    """Event calendar with a monotone clock."""

    __slots__ = ("now", "_heap", "_seq", "_cancelled", "events_processed")

    def __init__(self, start: float = 0.0) -> None:
        self.now = float(start)
        self._heap: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._cancelled: set[int] = set()
        self.events_processed = 0

    def schedule(self, time: float, kind: str, payload: Any = None) -> int:
        """Schedule an event; returns a token usable with `cancel`. Past times are refused."""
        if time < self.now - 1e-9 or math.isnan(time):
            raise ValueError(f"cannot schedule {kind} at t={time} before now={self.now}")
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, payload))
        return self._seq

    def cancel(self, token: int) -> None:
        self._cancelled.add(token)

    def __len__(self) -> int:
        return len(self._heap) - len(self._cancelled)

    def peek_time(self) -> float:
        """Time of the next live event (inf when none)."""
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0][1] in cancelled:
            cancelled.discard(heapq.heappop(heap)[1])
        return heap[0][0] if heap else math.inf

    def pop(self) -> tuple[float, str, Any] | None:
        """Advance the clock to the next live event and return (time, kind, payload)."""
        heap, cancelled = self._heap, self._cancelled
        while heap:
            time, seq, kind, payload = heapq.heappop(heap)
            if seq in cancelled:
                cancelled.discard(seq)
                continue
            self.now = time
            self.events_processed += 1
            return time, kind, payload
        return None

    def run(self, handlers: Mapping[str, Callable[[float, Any], None]], until: float = math.inf) -> float:
        """Dispatch events to ``handlers[kind](time, payload)`` until the calendar empties or
        the next event is after ``until``. Returns the final clock."""
        while True:
            if self.peek_time() > until:
                self.now = max(self.now, until) if math.isfinite(until) else self.now
                return self.now
            event = self.pop()
            if event is None:
                return self.now
            time, kind, payload = event
            handlers[kind](time, payload)


class TimeAverage:
    """Time-weighted mean of a piecewise-constant level (GPUs in use, GPUs rented, queue length).

    With ``sample_every`` set, also records the step function for plots as change points
    ``(time, level)``: the last level of each instant, unchanged levels skipped, at most one new point
    every ``sample_every`` seconds (0 = every change).
    """

    __slots__ = ("_t0", "_last_t", "_level", "_area", "_peak", "samples", "_sample_every", "_next_sample")

    def __init__(self, start: float = 0.0, level: float = 0.0, sample_every: float | None = None) -> None:
        self._t0 = self._last_t = float(start)
        self._level = float(level)
        self._area = 0.0
        self._peak = float(level)
        self._sample_every = sample_every
        self._next_sample = float(start)
        self.samples: list[tuple[float, float]] = []

    @property
    def level(self) -> float:
        return self._level

    @property
    def peak(self) -> float:
        return self._peak

    def update(self, now: float, level: float) -> None:
        """The level changes to ``level`` at time ``now``."""
        self._area += self._level * (now - self._last_t)
        self._last_t = now
        self._level = level
        if level > self._peak:
            self._peak = level
        if self._sample_every is None:
            return
        samples = self.samples
        if samples and samples[-1][0] == now:
            # several updates at one instant: the sample must hold the level that lasts
            samples[-1] = (now, level)
        elif (not samples or samples[-1][1] != level) and now >= self._next_sample:
            samples.append((now, level))
            self._next_sample = now + self._sample_every

    def integral(self, now: float) -> float:
        return self._area + self._level * (now - self._last_t)

    def mean(self, now: float) -> float:
        span = now - self._t0
        return self.integral(now) / span if span > 0 else self._level
