"""Confidence intervals for simulation output."""

from __future__ import annotations

import math

import numpy as np


def mean_ci(values: np.ndarray, confidence: float = 0.95, batches: int = 30) -> tuple[float, float, float]:
    """Mean and a batch-means confidence interval (robust to serial correlation between
    successive jobs of one run). Returns (mean, low, high)."""
    x = np.asarray(values, dtype=float)
    n = x.size
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    b = min(batches, n)
    if b < 2:
        return (mean, math.nan, math.nan)
    size = n // b
    means = x[: size * b].reshape(b, size).mean(axis=1)
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2, b - 1) * means.std(ddof=1) / math.sqrt(b))
    return (mean, mean - half, mean + half)
