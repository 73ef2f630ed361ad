"""Training time on preemptible (spot) capacity: checkpoints, lost work, restarts, and the spread.

- Checkpoint interval by Young's rule (Young 1974; Daly 2006 to first order): tau = sqrt(2 C M),
  C = time to write a checkpoint, M = mean time between preemptions of the job.
- A synchronous job stops when any of its nodes is preempted: job rate = nodes x per-node rate.
- Each preemption costs the restart time R plus the work since the last checkpoint (tau/2 on
  average, uniform over the interval) -- renewal-reward expectation:
      E[wall] = work * (1 + C/tau) / (1 - lambda * (R + tau/2))      (needs lambda*(R+tau/2) < 1)
- Spread: the number of preemptions N over the run is Poisson(lambda * E[wall]); the wall time for
  N preemptions is work*(1+C/tau) + N*(R + tau/2); quantiles p10/p50/p90 come from N's quantiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwise.errors import InputError

# Used only when no measured rate is available (gpuwise.hardware.spot_risk gives trace-based ones).
DEFAULT_RATE_PER_NODE_HOUR = 0.05
DEFAULT_RATE_SOURCE = "default 0.05 preemptions per node-hour (one per 20 h; no trace for this offering)"


def young_daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Optimal checkpoint interval sqrt(2 * C * MTBF) in seconds (Young 1974)."""
    if checkpoint_s <= 0:
        raise InputError("checkpoint time", checkpoint_s, "must be > 0 seconds")
    if mtbf_s <= 0:
        raise InputError("MTBF", mtbf_s, "must be > 0 seconds")
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def checkpoint_seconds(size_gb: float, write_gbps_per_node: float, nodes: int) -> float:
    """Time to write a checkpoint sharded over ``nodes`` (each node writes its shard in parallel)."""
    return size_gb / (write_gbps_per_node * max(nodes, 1))


@dataclass
class SpotTime:
    """Wall-clock time of a run on spot with preemptions."""

    work_s: float                  # failure-free compute time
    expected_s: float              # mean wall time incl. checkpoints, restarts and lost work
    p10_s: float
    p50_s: float
    p90_s: float
    expected_preemptions: float
    interval_s: float              # checkpoint interval used
    checkpoint_s: float            # seconds per checkpoint write
    rate_per_hour: float           # job-level preemption rate (all nodes)
    assumptions: list[str] = field(default_factory=list)


def _poisson_ppf(q: float, mu: float) -> int:
    from scipy.stats import poisson

    return int(poisson.ppf(q, mu))


def time_with_checkpoints(work_s: float, checkpoint_s: float, interval_s: float) -> float:
    """Failure-free wall time including periodic checkpoint writes."""
    return work_s * (1.0 + checkpoint_s / interval_s) if interval_s > 0 else work_s


def spot_time(work_s: float, rate_per_node_hour: float, nodes: int, checkpoint_s: float, restart_s: float,
              interval_s: float | None = None, rate_source: str = DEFAULT_RATE_SOURCE) -> SpotTime:
    """Expected wall time and its p10/p50/p90 on spot (see module docstring).

    ``interval_s`` None = Young/Daly; ``rate_per_node_hour`` preemptions per node-hour.
    """
    if work_s < 0:
        raise InputError("work", work_s, "must be >= 0 seconds")
    if rate_per_node_hour < 0:
        raise InputError("preemption rate", rate_per_node_hour, "must be >= 0 per hour")
    lam = rate_per_node_hour * max(nodes, 1) / 3600.0   # per second, whole job
    notes = [f"spot preemptions: {rate_source}; job rate = {nodes} node(s) x rate = {lam * 3600:.3g}/h",
             f"restart {restart_s / 60:.1f} min per preemption; lost work = half a checkpoint interval on average"]
    if lam == 0:
        return SpotTime(work_s, work_s, work_s, work_s, work_s, 0.0, math.inf, checkpoint_s, 0.0, notes)
    if interval_s is None:
        interval_s = young_daly_interval(max(checkpoint_s, 1e-3), 1.0 / lam)
        notes.append(f"checkpoint every {interval_s / 60:.1f} min (Young/Daly sqrt(2*C*MTBF), "
                     f"C={checkpoint_s:.0f} s, MTBF={1 / lam / 3600:.1f} h)")
    else:
        notes.append(f"checkpoint every {interval_s / 60:.1f} min (given)")
    base = time_with_checkpoints(work_s, checkpoint_s, interval_s)
    per = restart_s + interval_s / 2.0
    if lam * per >= 1.0:
        raise InputError("spot", f"rate {lam * 3600:.3g}/h",
                         "preemptions come faster than the job can restart and checkpoint; use on-demand "
                         "or fewer nodes")
    expected = base / (1.0 - lam * per)
    mu = lam * expected
    q = {p: base + _poisson_ppf(p, mu) * per for p in (0.1, 0.5, 0.9)}
    return SpotTime(work_s, expected, q[0.1], q[0.5], q[0.9], mu, interval_s, checkpoint_s, lam * 3600, notes)
