"""Training time on preemptible (spot) capacity: checkpoints, lost work, restarts, and the spread.

- Checkpoint interval by Young's rule (Young 1974; Daly 2006 to first order): tau = sqrt(2 C M),
  C = time to write a checkpoint, M = mean time between preemptions of the job.
- A synchronous job stops when any of its nodes is preempted: job rate = nodes x per-node rate.
- Each preemption costs the restart time R plus the work since the last checkpoint (tau/2 on
  average, uniform over the interval) -- renewal-reward expectation:
      E[wall] = work * (1 + C/tau) / (1 - lambda * (R + tau/2))      (needs lambda*(R+tau/2) < 1)
- Spread: the number of preemptions N over the run is Poisson(lambda * E[wall]); the wall time for
  N preemptions is work*(1+C/tau) + N*(R + tau/2); quantiles p10/p50/p90 come from N's quantiles and
  P(finish by a deadline) = P(N <= (deadline - work*(1+C/tau)) / (R + tau/2)).

``spot_times`` evaluates the model over numpy arrays (the planner prices thousands of offerings at
once); ``spot_time`` is the scalar form with assumptions. The Poisson quantiles and CDF are summed in
numpy over a window around the mean (no scipy.stats: its import alone costs ~1 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

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


# Above this mean the window (24 sd wide) would hold more points than it is worth: the Poisson law is
# then within ~1/(6 sqrt(mu)) < 1e-3 of its normal approximation, evaluated on a fixed grid instead.
_EXACT_MAX_MU = 1e6
_GRID = 4001


def _poisson_window(mu: float) -> tuple[np.ndarray, np.ndarray]:
    """(k, CDF(k)) over a window holding all but ~1e-12 of Poisson(mu)'s mass (mean +- 12 sd).

    k is increasing; unit steps up to `_EXACT_MAX_MU`, a bounded grid of whole counts above it, so a job
    of 1e30 tokens costs as little memory as one of 1e9 (it used to allocate TiBs)."""
    if mu <= 0:
        return np.array([0.0]), np.array([1.0])
    sd = math.sqrt(mu)
    if not math.isfinite(mu) or mu > _EXACT_MAX_MU:
        from math import erf

        z = np.linspace(-12.0, 12.0, _GRID)
        k = np.unique(np.floor(mu + z * sd))
        cdf = np.array([0.5 * (1.0 + erf((x + 0.5 - mu) / (sd * math.sqrt(2.0)))) for x in k])
        return k, cdf
    lo = max(0, int(mu - 12 * sd - 10))
    hi = int(mu + 12 * sd + 20)
    k = np.arange(lo, hi + 1, dtype=float)
    log_p0 = -mu + lo * math.log(mu) - math.lgamma(lo + 1)
    logp = log_p0 + np.concatenate(([0.0], np.cumsum(math.log(mu) - np.log(k[1:]))))
    cdf = np.cumsum(np.exp(logp))   # mass below the window (< 1e-30 at this width) is ignored
    return k, np.minimum(cdf, 1.0)


def _cdf_at(k: np.ndarray, cdf: np.ndarray, x):
    """P(N <= x) from a window (k, cdf): 0 below it, 1 above it."""
    x = np.floor(np.asarray(x, dtype=float))
    idx = np.clip(np.searchsorted(k, x, side="right") - 1, 0, k.size - 1)
    return np.where(x >= k[-1], 1.0, np.where(x < k[0], 0.0, cdf[idx]))


def poisson_ppf(q: float, mu: float) -> int:
    """Smallest k with P(N <= k) >= q for N ~ Poisson(mu) (equals scipy.stats.poisson.ppf)."""
    k, cdf = _poisson_window(mu)
    i = int(np.searchsorted(cdf, q - 1e-12))
    return int(k[min(i, k.size - 1)])


def poisson_cdf(x: float, mu: float) -> float:
    """P(N <= x) for N ~ Poisson(mu)."""
    if x < 0:
        return 0.0
    k, cdf = _poisson_window(mu)
    return float(_cdf_at(k, cdf, x))


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
    q = {p: base + poisson_ppf(p, mu) * per for p in (0.1, 0.5, 0.9)}
    return SpotTime(work_s, expected, q[0.1], q[0.5], q[0.9], mu, interval_s, checkpoint_s, lam * 3600, notes)


@dataclass
class SpotArrays:
    """``spot_times`` output, one entry per input row (seconds; inf where restarts cannot keep up)."""

    expected_s: np.ndarray
    p10_s: np.ndarray
    p90_s: np.ndarray
    expected_preemptions: np.ndarray
    interval_s: np.ndarray          # checkpoint interval used (inf without preemptions)
    prob: np.ndarray                # P(finish by the deadline); nan without a deadline


def spot_times(work_s, rate_per_node_hour, nodes, checkpoint_s, restart_s, interval_s=None,
               deadline_s=None) -> SpotArrays:
    """The model of ``spot_time`` over numpy-broadcastable arrays, plus P(finish by ``deadline_s``).

    ``interval_s`` None = Young/Daly per row. Rows whose preemptions come faster than the job can
    restart and checkpoint get inf times and probability 0 (``spot_time`` raises InputError instead).
    """
    work, rate, n, ck, rs = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in
                                                  (work_s, rate_per_node_hour, nodes, checkpoint_s, restart_s)))
    work, rate, n, ck, rs = (np.atleast_1d(x).astype(float) for x in (work, rate, n, ck, rs))
    lam = rate * np.maximum(n, 1.0) / 3600.0
    has = lam > 0
    safe_lam = np.where(has, lam, 1.0)
    if interval_s is None:
        with np.errstate(over="ignore"):   # vanishing rates: interval -> inf, no preemptions either way
            tau = np.sqrt(2.0 * np.maximum(ck, 1e-3) / safe_lam)
    else:
        tau = np.broadcast_to(np.asarray(interval_s, float), work.shape).astype(float)
    tau = np.where(has, tau, np.inf)
    base = np.where(has, work * (1.0 + ck / np.where(has, tau, 1.0)), work)
    per = rs + tau / 2.0
    load = lam * np.where(has, per, 0.0)   # 0 where there are no preemptions (tau = inf)
    ok = load < 1.0
    mean = np.where(ok, base / np.where(ok, 1.0 - load, 1.0), np.inf)
    mu = np.where(has & ok, lam * mean, np.where(ok, 0.0, np.inf))
    p10, p90 = mean.copy(), mean.copy()
    p10[~has], p90[~has] = work[~has], work[~has]
    prob = np.full(work.shape, np.nan)
    dl = None if deadline_s is None else np.broadcast_to(np.asarray(deadline_s, float), work.shape)
    if dl is not None:
        prob = np.where(has, 0.0, (work <= dl).astype(float))
    rows = np.flatnonzero(has & ok)
    # quantiles per distinct mean count (candidates share them: same work, rate and nodes)
    uniq, inv = np.unique(mu[rows], return_inverse=True)
    for j, m in enumerate(uniq):
        k, cdf = _poisson_window(float(m))
        lo_q, hi_q = (k[min(int(np.searchsorted(cdf, q - 1e-12)), k.size - 1)] for q in (0.1, 0.9))
        sel = rows[inv.ravel() == j]
        p10[sel] = base[sel] + lo_q * per[sel]
        p90[sel] = base[sel] + hi_q * per[sel]
        if dl is not None:
            slack = dl[sel] - base[sel]
            pr = _cdf_at(k, cdf, np.where(slack >= 0, slack, 0.0) / per[sel])
            prob[sel] = np.where(slack < 0, 0.0, pr)
    return SpotArrays(mean, p10, p90, mu, tau, prob)
