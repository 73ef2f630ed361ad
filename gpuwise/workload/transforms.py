"""What-if variants of a job stream: the same jobs at another arrival rate, or with the users'
fixed batch at another point of each application's batch range.

Both are pure functions of a `Workload`; the simulator and the benchmarks use them to sweep load
and the users' batch choice without editing trace files.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuwise.errors import InputError
from gpuwise.workload.traces import Workload


def at_load(workload: Workload, factor: float) -> Workload:
    """The same jobs with every arrival time divided by ``factor`` (``factor`` x the arrival rate)."""
    if not math.isfinite(factor) or factor <= 0:
        raise InputError("--load", factor, "give an arrival-rate factor > 0 (2 = twice as many arrivals per hour)")
    if factor == 1:
        return workload
    return replace(workload, jobs=tuple(replace(j, arrival_s=j.arrival_s / factor) for j in workload.jobs),
                   source=f"{workload.source} at {factor:g}x load",
                   notes=workload.notes + (f"arrival times divided by {factor:g} ({factor:g}x the arrival rate)",))


def batch_at(lo: int, hi: int, position: float) -> int:
    """The batch at ``position`` of [lo, hi] on a log scale: 0 = lo, 0.5 = geometric middle, 1 = hi."""
    return int(round(lo * (hi / lo) ** position))


def with_batch_position(workload: Workload, position: float) -> Workload:
    """Every Pollux-application job's fixed batch moved to ``position`` of its application's validated
    range [smallest, largest validated global batch] (log scale); other jobs are unchanged.

    The elastic policies choose their own batch in that range either way; this moves only what a
    fixed-batch policy runs at (the batch the user picked)."""
    from gpuwise.workload.pollux_traces import validated_batch_range

    if not math.isfinite(position) or not 0 <= position <= 1:
        raise InputError("batch position", position, "give a number in [0, 1] (0 = smallest validated batch)")
    jobs = tuple(replace(j, batch_size=batch_at(*validated_batch_range(j.application), position))
                 if j.application is not None and j.jobspec is None else j for j in workload.jobs)
    return replace(workload, jobs=jobs,
                   notes=workload.notes + (f"each application job's fixed batch at {position:g} of its "
                                           "validated batch range (log scale)",))
