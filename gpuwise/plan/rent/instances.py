"""Instance-aware widths: when GPUs are sold only in fixed instance sizes (e.g. 1/2/4/8-GPU VMs),
a width that is not a sum of instances pays for idle GPUs (paper A.7 item 2). The instance-aware
policy only uses widths the instances make up exactly, and time-shares (randomises across jobs)
between neighbouring ones, which traces the concave hull of s over those widths (A.3.6). So each
type's speedup is replaced by the piecewise-linear hull through s at the achievable widths and
the ordinary solver does the rest."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from gpuwise.plan.rent.jobtypes import JobType
from gpuwise.plan.rent.speedup import PiecewiseLinearSpeedup

LIMIT = 4096  # widest width considered for an uncapped type


def instance_gpus(width: np.ndarray, sizes: Sequence[int] | None) -> np.ndarray:
    """GPUs paid for when a width must be bought as instances: the smallest instance that holds
    it, or, beyond the largest instance, whole largest instances (multi-node jobs use full nodes)."""
    if not sizes:
        return np.asarray(width, dtype=float)
    need = np.ceil(np.asarray(width, dtype=float) - 1e-9)
    sz = np.array(sorted(sizes), dtype=float)
    big = sz[-1]
    pos = np.searchsorted(sz, need)  # smallest size >= need
    single = sz[np.minimum(pos, sz.size - 1)]
    return np.where(need <= big, single, np.ceil(need / big) * big)


def achievable_widths(sizes: Sequence[int], limit: int) -> list[int]:
    """Widths bought without idle GPUs: the instance sizes, then multiples of the largest (the
    rounding rule of `instance_gpus`, by which the cloud simulator bills)."""
    return sorted({int(g) for g in instance_gpus(np.arange(1, limit + 1, dtype=float), tuple(sizes)) if g <= limit})


def instance_aware(types: Sequence[JobType], sizes: Sequence[int]) -> list[JobType]:
    out = []
    for t in types:
        cap = t.speedup.cap
        limit = int(math.floor(cap)) if math.isfinite(cap) else LIMIT
        ws = [w for w in achievable_widths(sizes, max(limit, 1)) if w <= limit] or [1]
        if ws[0] != 1:  # the smallest instance is the narrowest possible width; s is still relative to 1 GPU
            ws = [1] + ws
        table = {float(w): float(t.speedup(w)) for w in ws}
        sp = PiecewiseLinearSpeedup.from_table(table, f"{t.field_prefix}.speedup")
        out.append(replace(t, speedup=sp))
    return out
