"""Spot columns for many candidates at once, on `gpuwise.estimate.preemption`'s model.

`preemption.spot_time` is scalar and takes its Poisson quantiles from scipy.stats, whose import
alone costs ~1 s -- half the planner's time budget. Here the same model (Young/Daly interval,
renewal-reward mean, Poisson(lambda x E[wall]) preemptions for p10/p90; see that module's
docstring) is evaluated once per distinct (work, rate, nodes, checkpoint) with the interval and
checkpoint helpers of `preemption`, and the Poisson quantiles/CDF in numpy. A test checks every
column against `preemption.spot_time` row by row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuwise.estimate import preemption as pre


@dataclass
class SpotColumns:
    mean_h: np.ndarray
    p10_h: np.ndarray
    p90_h: np.ndarray
    expected_preemptions: np.ndarray
    interval_h: np.ndarray          # checkpoint interval used
    prob: np.ndarray                # P(finish by the deadline); nan without a deadline


def _poisson_window(mu: float) -> tuple[np.ndarray, np.ndarray]:
    """(k, CDF(k)) over a window holding all but ~1e-12 of Poisson(mu)'s mass."""
    if mu <= 0:
        return np.array([0.0]), np.array([1.0])
    sd = math.sqrt(mu)
    lo = max(0, int(mu - 12 * sd - 10))
    hi = int(mu + 12 * sd + 20)
    k = np.arange(lo, hi + 1, dtype=float)
    log_p0 = -mu + lo * math.log(mu) - math.lgamma(lo + 1)
    logp = log_p0 + np.concatenate(([0.0], np.cumsum(math.log(mu) - np.log(k[1:]))))
    cdf = np.cumsum(np.exp(logp))   # mass below the window (< 1e-30 at this width) is ignored
    return k, np.minimum(cdf, 1.0)


def poisson_ppf(q: float, mu: float) -> int:
    """Smallest k with P(N <= k) >= q for N ~ Poisson(mu)."""
    k, cdf = _poisson_window(mu)
    i = int(np.searchsorted(cdf, q - 1e-12))
    return int(k[min(i, k.size - 1)])


def poisson_cdf(x: float, mu: float) -> float:
    """P(N <= x) for N ~ Poisson(mu)."""
    if x < 0:
        return 0.0
    k, cdf = _poisson_window(mu)
    if x >= k[-1]:
        return 1.0
    if x < k[0]:
        return 0.0
    return float(cdf[int(math.floor(x) - k[0])])


def _one(work_h: float, rate_node: float, nodes: int, ckpt_gb: float, write_gbps: float,
         restart_h: float, interval_h: float | None, deadline_h: float | None) -> tuple:
    lam = rate_node * max(nodes, 1) / 3600.0            # job preemptions per second
    work = work_h * 3600.0
    if lam == 0:
        prob = math.nan if deadline_h is None else float(work_h <= deadline_h)
        return (work_h, work_h, work_h, 0.0, math.inf, prob)
    ck = pre.checkpoint_seconds(ckpt_gb, write_gbps, nodes)
    tau = interval_h * 3600.0 if interval_h else pre.young_daly_interval(max(ck, 1e-3), 1.0 / lam)
    base = pre.time_with_checkpoints(work, ck, tau)
    per = restart_h * 3600.0 + tau / 2.0
    if lam * per >= 1.0:   # restarts cannot keep up: the job never finishes on spot
        return (math.inf, math.inf, math.inf, math.inf, tau / 3600.0, 0.0 if deadline_h is not None else math.nan)
    mean = base / (1.0 - lam * per)
    mu = lam * mean
    p10 = base + poisson_ppf(0.1, mu) * per
    p90 = base + poisson_ppf(0.9, mu) * per
    prob = math.nan
    if deadline_h is not None:
        slack = deadline_h * 3600.0 - base
        prob = 0.0 if slack < 0 else poisson_cdf(math.floor(slack / per), mu)
    return (mean / 3600.0, p10 / 3600.0, p90 / 3600.0, mu, tau / 3600.0, prob)


def spot_columns(work_h: np.ndarray, rate_node: np.ndarray, nodes: np.ndarray, ckpt_gb: np.ndarray, *,
                 write_gbps: float, restart_h: float, interval_h: float | None,
                 deadline_h: float | None) -> SpotColumns:
    """Per row: work (failure-free hours), preemption rate per node-hour, nodes, checkpoint GB.

    write_gbps: checkpoint write bandwidth per node (GB/s); restart_h: hours per restart;
    interval_h: fixed checkpoint interval (None = Young/Daly); deadline_h: for P(finish in time).
    """
    n = int(np.size(work_h))
    out = np.full((n, 6), np.nan)
    memo: dict[tuple, tuple] = {}
    for i in range(n):
        key = (float(work_h[i]), float(rate_node[i]), int(nodes[i]), float(ckpt_gb[i]))
        if key not in memo:
            memo[key] = _one(*key, write_gbps, restart_h, interval_h, deadline_h)
        out[i] = memo[key]
    return SpotColumns(*(out[:, j].copy() for j in range(6)))
