"""Pareto front of candidates on the (time, cost) plane: both minimised."""

from __future__ import annotations

import numpy as np


def pareto_front(time: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points, fastest first (cost strictly decreasing along it).

    A point is dominated when another is no slower and no dearer and better in one of the two.
    Of exact duplicates only the first (lowest index) is kept. O(n log n): sort by (time, cost,
    index) and keep each point cheaper than everything faster.
    """
    t = np.asarray(time, dtype=float)
    c = np.asarray(cost, dtype=float)
    if t.shape != c.shape or t.ndim != 1:
        raise ValueError("time and cost must be 1-D arrays of the same length")
    ok = np.isfinite(t) & np.isfinite(c)
    idx = np.nonzero(ok)[0]
    if idx.size == 0:
        return idx
    order = idx[np.lexsort((idx, c[idx], t[idx]))]
    cs = c[order]
    # best cost among all strictly-earlier points in the sorted order
    prev_best = np.concatenate(([np.inf], np.minimum.accumulate(cs)[:-1]))
    return order[cs < prev_best]
