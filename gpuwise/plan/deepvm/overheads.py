"""DeepVM overhead models: scaling factor SF(n) and network saturation n_sat (papers.md D.3)."""

from __future__ import annotations

import bisect
import math

from .data import ScalingParams


def logistic_speedup(p: ScalingParams, n: float) -> float:
    """S(n) = c / (1 + exp(-a (n - b))): fitted multi-node speedup."""
    return p.c / (1.0 + math.exp(-p.a * (n - p.b)))


def linear_speedup(p: ScalingParams, n: float) -> float:
    """L(n) = (a c / 4)(n - b) + c/2: tangent of S at its inflection point b (ideal linear part)."""
    return p.a * p.c / 4.0 * (n - p.b) + p.c / 2.0


def scaling_factor(p: ScalingParams, n: float) -> float:
    """SF(n) = 1 for n <= b, else S(n)/L(n) in (0, 1]: the loss against linear scaling."""
    if n <= p.b:
        return 1.0
    return logistic_speedup(p, n) / linear_speedup(p, n)


def modelled_speedup(p: ScalingParams, n: float) -> float:
    """The paper's "estimated speedup" (Fig. 5): L(n) up to b, S(n) beyond."""
    return linear_speedup(p, n) if n <= p.b else logistic_speedup(p, n)


def n_sat(table: tuple[tuple[float, int], ...], bandwidth_gbps: float) -> int:
    """Training nodes one checkpoint node can serve at `min(BW_gpu, BW_remote)`.

    The artifact looks bandwidths up exactly (and fails on others); we take the row with the
    largest bandwidth <= the given one (floor), which is conservative and equals the exact
    lookup on the table's own values. Below the first row: that row's value, the smallest.
    """
    keys = [b for b, _ in table]
    i = bisect.bisect_right(keys, bandwidth_gbps + 1e-12) - 1
    return table[max(i, 0)][1]
