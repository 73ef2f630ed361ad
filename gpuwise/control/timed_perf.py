"""A PerfModel that times itself, so a round's decision time excludes the model's evaluation.

Policies read goodput tables through the `PerfModel` they are given (Gavel's style: a table in, a
decision out). Building those tables (the goodput object's layout search for job-spec jobs, fitted
models for the rest) is model evaluation, not the policy's decision: the control loop wraps the
model in ``TimedPerf`` and reports the two separately.
"""

from __future__ import annotations

import time


class TimedPerf:
    """Forwards every call to ``inner`` and adds the wall seconds spent in it to ``seconds`` and the
    process CPU seconds to ``cpu_seconds``."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.seconds = 0.0
        self.cpu_seconds = 0.0

    def __getattr__(self, name: str):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.cpu_seconds += time.process_time() - c0

        return timed
