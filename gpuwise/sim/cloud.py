"""Pay-per-use cloud simulator on the shared event core (`gpuwise.sim.engine.Engine`).

An unbounded cluster: every job rents its GPUs on arrival (after an optional VM boot delay,
which is billed), runs at speed s(k), and releases them on completion. Realism switches the
paper leaves out: boot delay, billing granularity with a minimum charge, and GPUs sold only in
fixed instance sizes (a width is rounded up to instances, which are all paid for; the job still
runs at its policy width). Widths, sizes and durations are drawn vectorised before the run, so
the event loop only moves the clock, the rented level and the response-time records.

Two paths, one answer: the same rental policy also runs through THE policy interface
(`gpuwise.policies.rental.FixedWidthScheduler`) in the general cluster simulator on an unbounded
cluster (`gpuwise.sim.cloud_cluster.simulate_on_cluster`), and on the same seeded stream both give
the same response times, rented GPUs and occupancy quantiles to rel 1e-9
(tests/test_sched_unbounded.py). This path exists for speed: a fixed-width policy needs no
allocation rounds, so there is no policy call, view or placement per job and 10^6 jobs take
seconds; the general loop is some 40x slower per job (benchmarks/rent_sim.py prints the ratio).
"""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuwise.errors import InputError
from gpuwise.plan.rent.instances import instance_gpus  # noqa: F401  (re-exported: the billing rule)
from gpuwise.sim.engine import Engine
from gpuwise.sim.stats import mean_ci

_ARRIVE, _DEPART = "arrive", "depart"
_LEVEL_UNIT = 1_000_000  # rented level kept as an integer number of micro-GPUs: exact sums


@dataclass(frozen=True)
class CloudConfig:
    boot_delay: float = 0.0                       # hours from request to usable GPUs (billed, adds to T)
    billing_increment: float = 0.0                # hours; each rental rounded up to a multiple (0 = exact)
    minimum_charge: float = 0.0                   # hours billed at least per rental
    instance_sizes: tuple[int, ...] | None = None  # GPUs per instance on sale, e.g. (1, 2, 4, 8)

    def describe(self) -> list[str]:
        out = []
        if self.boot_delay > 0:
            out.append(f"VM boot delay {self.boot_delay * 3600:g} s per job (billed; adds to response time)")
        if self.billing_increment > 0:
            out.append(f"billing rounded up to {self.billing_increment * 3600:g} s per rental")
        if self.minimum_charge > 0:
            out.append(f"minimum charge {self.minimum_charge * 3600:g} s per rental")
        if self.instance_sizes:
            out.append("GPUs sold in " + "/".join(map(str, self.instance_sizes))
                       + "-GPU instances; a width is rounded up to the smallest instance holding it (whole "
                         "largest instances beyond), all paid for; the job runs at its policy width")
        return out or ["idealised cloud: no boot delay, per-second exact billing, any width (paper model)"]


@dataclass(frozen=True)
class Workload:
    arrival: np.ndarray     # arrival times (hours), non-decreasing
    type_idx: np.ndarray    # type index of each job
    size: np.ndarray        # single-GPU hours of work
    source: str             # "poisson" or the trace file


@dataclass(frozen=True)
class CloudResult:
    policy: str
    jobs: int
    horizon: float                                  # hours simulated (last arrival)
    mean_response_time: tuple[float, float, float]  # mean, 95% CI low, high (batch means)
    per_type_response_time: tuple[float, ...]
    mean_gpus_rented: tuple[float, float, float]    # time average of GPUs held, with CI
    mean_gpus_billed: float                         # billed GPU-hours per hour
    p95_gpus: float
    p99_gpus: float
    p_zero: float                                   # fraction of time with nothing rented
    events: int
    wall_s: float
    assumptions: tuple[str, ...] = field(default=())


def poisson_workload(types, n_jobs: int, rng: np.random.Generator) -> Workload:
    """Superposed Poisson streams: total rate sum lambda_i, each job's type drawn by lambda_i/lambda."""
    if n_jobs < 1:
        raise InputError("--jobs", n_jobs, "must be at least 1")
    rates = np.array([t.arrival_rate for t in types])
    lam = rates.sum()
    arrival = np.cumsum(rng.exponential(1.0 / lam, n_jobs))
    type_idx = rng.choice(len(types), size=n_jobs, p=rates / lam)
    size = np.empty(n_jobs)
    for i, t in enumerate(types):
        mask = type_idx == i
        size[mask] = t.sizes.sample(rng, int(mask.sum()))
    return Workload(arrival, type_idx, size, "poisson")


def trace_workload(path: Path, types, rng: np.random.Generator, n_jobs: int | None = None) -> Workload:
    """Arrivals from a CSV with columns arrival_time (hours), type[, size]; a missing size is drawn
    from the type's size distribution."""
    from gpuwise.plan.rent.spec import load_trace

    names = {t.name: i for i, t in enumerate(types)}
    rows = [(a.time_h, names[a.type], math.nan if a.size is None else a.size) for a in load_trace(Path(path), names)]
    if n_jobs is not None:
        rows = rows[:n_jobs]
    arr = np.array([r[0] for r in rows])
    idx = np.array([r[1] for r in rows], dtype=int)
    size = np.array([r[2] for r in rows])
    for i, t in enumerate(types):
        miss = (idx == i) & np.isnan(size)
        size[miss] = t.sizes.sample(rng, int(miss.sum()))
    return Workload(arr - arr[0], idx, size, str(path))


def job_speeds(types, type_idx: np.ndarray, width: np.ndarray) -> np.ndarray:
    speed = np.empty(width.shape)
    for i, t in enumerate(types):
        mask = type_idx == i
        speed[mask] = t.speedup(width[mask])
    return speed


def per_type_means(values: np.ndarray, type_idx: np.ndarray, n_types: int) -> tuple[float, ...]:
    """Mean of ``values`` over the jobs of each type (NaN for a type without jobs)."""
    return tuple(float(values[type_idx == i].mean()) if np.any(type_idx == i) else math.nan
                 for i in range(n_types))


def time_quantile(levels: np.ndarray, weights: np.ndarray, p: float) -> float:
    """Quantile ``p`` of a level held for ``weights`` (time) at each of ``levels``: the smallest
    level whose cumulative share of time reaches ``p`` (the smallest level if no time passed)."""
    order = np.argsort(levels, kind="stable")
    lv, w = np.asarray(levels, float)[order], np.asarray(weights, float)[order]
    total = float(w.sum())
    if total <= 0:
        return float(lv[0])
    cdf = np.cumsum(w) / total
    return float(lv[min(int(np.searchsorted(cdf, p - 1e-12)), lv.size - 1)])


def simulate(types, policy, workload: Workload, config: CloudConfig = CloudConfig(),
             rng: np.random.Generator | None = None, batches: int = 30) -> CloudResult:
    """Run the stream through the cloud under `policy` on the shared Engine."""
    rng = rng or np.random.default_rng(0)
    started = _time.perf_counter()
    n = workload.arrival.size
    width = policy.assign(workload.type_idx, workload.size, rng)
    held = instance_gpus(width, config.instance_sizes)
    duration = config.boot_delay + workload.size / job_speeds(types, workload.type_idx, width)
    billed_time = np.maximum(duration, config.minimum_charge)
    if config.billing_increment > 0:
        billed_time = np.ceil(billed_time / config.billing_increment - 1e-12) * config.billing_increment
    billed = float(np.sum(held * billed_time))

    arrival = workload.arrival.tolist()
    dur = duration.tolist()
    units = np.rint(held * _LEVEL_UNIT).astype(np.int64).tolist()
    horizon = arrival[-1] if n > 1 else arrival[0] + duration[0]
    span = horizon / batches if horizon > 0 else 1.0
    batch_area = [0.0] * batches
    time_at: dict[int, float] = {}
    response = [0.0] * n

    engine = Engine()
    schedule, pop = engine.schedule, engine.pop
    schedule(arrival[0], _ARRIVE, 0)
    level = 0
    last = 0.0
    b = 0
    edge = span
    while True:
        ev = pop()
        if ev is None:
            break
        t, kind, j = ev
        if last < horizon:  # accumulate the rented level over [last, min(t, horizon)]
            upto = t if t < horizon else horizon
            while upto > edge and b < batches - 1:
                batch_area[b] += level * (edge - last)
                time_at[level] = time_at.get(level, 0.0) + (edge - last)
                last, b, edge = edge, b + 1, edge + span
            batch_area[b] += level * (upto - last)
            time_at[level] = time_at.get(level, 0.0) + (upto - last)
            last = upto
        if kind is _ARRIVE:
            level += units[j]
            schedule(t + dur[j], _DEPART, j)
            if j + 1 < n:
                schedule(arrival[j + 1], _ARRIVE, j + 1)
        else:
            level -= units[j]
            response[j] = t - arrival[j]

    resp = np.asarray(response)
    rt = mean_ci(resp, batches=batches)
    gpus = np.asarray(batch_area) / span / _LEVEL_UNIT
    g_ci = mean_ci(gpus, batches=batches)
    per_type = per_type_means(resp, workload.type_idx, len(types))
    levels = np.array(sorted(time_at), dtype=float)
    weights = np.array([time_at[int(v)] for v in levels])
    levels /= _LEVEL_UNIT
    notes = config.describe() + [
        f"{n} jobs ({workload.source} arrivals); CIs are 95% batch means over {batches} batches",
        "time-average GPUs measured over [0, last arrival]; billed GPU-hours include the final jobs' tails",
    ]
    return CloudResult(
        policy=policy.name, jobs=n, horizon=horizon, mean_response_time=rt, per_type_response_time=per_type,
        mean_gpus_rented=g_ci, mean_gpus_billed=billed / horizon if horizon > 0 else math.nan,
        p95_gpus=time_quantile(levels, weights, 0.95), p99_gpus=time_quantile(levels, weights, 0.99),
        p_zero=float(time_at.get(0, 0.0) / max(horizon, 1e-300)),
        events=engine.events_processed, wall_s=_time.perf_counter() - started, assumptions=tuple(notes))
