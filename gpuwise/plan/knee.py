"""Kneedle knee detection (Satopää, Albrecht, Irwin, Raghavan, ICDCSW 2011).

Offline variant on a finite curve: normalise x and y to [0, 1], turn the curve into the
concave-increasing shape the method is defined for, take the difference curve y_d = y_n - x_n;
each local maximum of y_d is a knee candidate, confirmed when y_d falls below the threshold
T = y_d(max) - S * mean(diff(x_n)) before the next local maximum (or by the end of the data).
Scavenger (CCGrid'23, Sec. III) picks the knee of the cost-vs-time curve this way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CURVES = ("concave", "convex")
DIRECTIONS = ("increasing", "decreasing")


@dataclass(frozen=True)
class Knees:
    indices: list[int]          # confirmed knees, in x order (indices into the input arrays)
    difference: np.ndarray      # difference curve, aligned with the input order
    best: int | None            # the confirmed knee with the largest difference, else None


def kneedle(x, y, curve: str = "convex", direction: str = "decreasing",
            sensitivity: float = 1.0) -> Knees:
    """Knees of y(x).

    x, y: samples (any order; sorted by x internally, x must be distinct).
    curve: "concave" or "convex" (shape of y against x).
    direction: "increasing" or "decreasing" (trend of y with x).
    sensitivity: S; larger S confirms fewer knees (S = 1 is the paper's offline default).
    """
    if curve not in CURVES or direction not in DIRECTIONS:
        raise ValueError(f"curve in {CURVES}, direction in {DIRECTIONS}")
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n = x.size
    if n < 3:
        return Knees([], np.zeros(n), None)
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    xn = (xs - xs[0]) / (xs[-1] - xs[0]) if xs[-1] > xs[0] else np.zeros(n)
    span = ys.max() - ys.min()
    yn = (ys - ys.min()) / span if span > 0 else np.zeros(n)
    # Map every shape onto concave-increasing: convex -> flip y; convex-increasing and
    # concave-decreasing also mirror x (then the knee index counts from the right).
    mirror = (curve == "convex") == (direction == "increasing")
    if curve == "convex":
        yn = 1.0 - yn
    if mirror:
        xn, yn = 1.0 - xn[::-1], yn[::-1]
    yd = yn - xn
    step = np.mean(np.diff(xn))
    knees = []
    lmx = [i for i in range(1, n - 1) if yd[i - 1] < yd[i] >= yd[i + 1]]
    for k, i in enumerate(lmx):
        threshold = yd[i] - sensitivity * step
        stop = lmx[k + 1] if k + 1 < len(lmx) else n
        if np.any(yd[i + 1:stop] < threshold):
            knees.append(i)
    # back to input indices
    to_sorted = (lambda i: n - 1 - i) if mirror else (lambda i: i)
    diff_aligned = np.empty(n)
    diff_sorted = yd[::-1] if mirror else yd
    diff_aligned[order] = diff_sorted
    best = max(knees, key=lambda i: yd[i]) if knees else None
    return Knees(sorted(int(order[to_sorted(i)]) for i in knees), diff_aligned,
                 None if best is None else int(order[to_sorted(best)]))


def knee_of_front(time, cost) -> int:
    """Index (into the given arrays) of the knee of a time/cost Pareto front.

    Cost falls convexly as time grows along a front. With fewer than 3 points or no confirmed
    knee we return the point maximising the difference curve (ties: the cheaper), and with a
    single point, that point.
    """
    t = np.asarray(time, dtype=float)
    c = np.asarray(cost, dtype=float)
    if t.size == 0:
        raise ValueError("empty front")
    if t.size < 3:
        return int(np.argmin(c))
    k = kneedle(t, c, curve="convex", direction="decreasing")
    if k.best is not None:
        return k.best
    best = np.flatnonzero(k.difference == k.difference.max())
    return int(best[np.argmin(c[best])])
