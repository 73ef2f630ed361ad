"""Spot columns for many planner candidates at once: hours in, hours out, on the single spot model
`gpuwise.estimate.preemption.spot_times` (Young/Daly interval, renewal-reward mean, Poisson spread,
P(finish by the deadline)). Nothing of the model lives here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.estimate import preemption as pre
from gpuwise.estimate.preemption import poisson_cdf, poisson_ppf  # noqa: F401  (re-exported for callers)


@dataclass
class SpotColumns:
    mean_h: np.ndarray
    p10_h: np.ndarray
    p90_h: np.ndarray
    expected_preemptions: np.ndarray
    interval_h: np.ndarray          # checkpoint interval used
    prob: np.ndarray                # P(finish by the deadline); nan without a deadline


def spot_columns(work_h: np.ndarray, rate_node: np.ndarray, nodes: np.ndarray, ckpt_gb: np.ndarray, *,
                 write_gbps: float, restart_h: float, interval_h: float | None,
                 deadline_h: float | None) -> SpotColumns:
    """Per row: work (failure-free hours), preemption rate per node-hour, nodes, checkpoint GB.

    write_gbps: checkpoint write bandwidth per node (GB/s); restart_h: hours per restart;
    interval_h: fixed checkpoint interval (None = Young/Daly); deadline_h: for P(finish in time).
    """
    nodes = np.asarray(nodes, float)
    ck_s = np.asarray(ckpt_gb, float) / (write_gbps * np.maximum(nodes, 1.0))   # = pre.checkpoint_seconds
    d = pre.spot_times(np.asarray(work_h, float) * 3600.0, rate_node, nodes, ck_s, restart_h * 3600.0,
                       None if not interval_h else interval_h * 3600.0,
                       None if deadline_h is None else deadline_h * 3600.0)
    return SpotColumns(d.expected_s / 3600.0, d.p10_s / 3600.0, d.p90_s / 3600.0, d.expected_preemptions,
                       d.interval_s / 3600.0, d.prob)
