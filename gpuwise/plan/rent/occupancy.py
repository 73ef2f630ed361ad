"""How many GPUs are rented at a random moment under a fixed-width policy.

GPUs are rented on arrival and released on completion, so each (type, width) class is an
infinite-server queue. With Poisson arrivals, the number of class-j jobs present is
Poisson(m_j), m_j = lambda_j E[X_j]/s(k_j), whatever the size distribution (M/G/inf
insensitivity), and the classes are independent (paper A.2, A.4 "Burstiness"). So
K = sum_j k_j N_j is compound Poisson; its distribution is computed exactly on the lattice of
whole GPUs (integer widths) or on a fine grid (fractional widths, stated in the assumptions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuwise.plan.rent.jobtypes import JobType
from gpuwise.plan.rent.solver import RentSolution

_MAX_CELLS = 200_000  # lattice size limit; a coarser grid beyond it


@dataclass(frozen=True)
class Occupancy:
    mean: float              # E[K], equals the GPU budget used
    std: float               # standard deviation of K
    p95: float               # 95th percentile of GPUs rented at a random moment
    p99: float
    p_zero: float            # P(K = 0): nothing rented
    p_over_budget: float     # P(K > mean): fraction of time spending above the long-run rate
    max_rate_classes: int    # number of (type, width) infinite-server classes
    grid: float              # lattice step used for the quantiles (0 = exact enumeration, 1 = exact whole GPUs)
    assumptions: tuple[str, ...]


def classes(types: list[JobType] | tuple[JobType, ...], sol: RentSolution) -> list[tuple[float, float]]:
    """(width k_j, mean number present m_j) of every (type, width) class."""
    out = []
    for t, a in zip(types, sol.types):
        for k, q in a.widths:
            # jobs present = arrival rate x time held (boot + run), Little's law per class
            out.append((k, t.arrival_rate * q * (sol.boot_delay + t.mean_size / float(t.speedup(k)))))
    return out


def _poisson_pmf(m: float, n_max: int) -> np.ndarray:
    from scipy.stats import poisson

    return poisson.pmf(np.arange(n_max + 1), m)


def distribution(cls: list[tuple[float, float]]) -> tuple[np.ndarray, float]:
    """PMF of K on a lattice of step `grid` (index i <-> i*grid GPUs)."""
    mean = sum(k * m for k, m in cls)
    sd = math.sqrt(sum(k * k * m for k, m in cls))
    top = mean + 12 * sd + max(k for k, _ in cls) * 3
    integral = all(abs(k - round(k)) < 1e-9 for k, _ in cls)
    grid = 1.0 if integral else 0.01
    if top / grid > _MAX_CELLS:
        grid = top / _MAX_CELLS
    cells = int(math.ceil(top / grid)) + 1
    from scipy.signal import fftconvolve

    pmf = np.zeros(cells)
    pmf[0] = 1.0
    for k, m in cls:
        if m <= 0:
            continue
        step = max(1, int(round(k / grid)))
        n_max = min(int(m + 12 * math.sqrt(m) + 20), (cells - 1) // step)
        comp = np.zeros(n_max * step + 1)
        comp[::step] = _poisson_pmf(m, n_max)
        pmf = fftconvolve(pmf, comp)[:cells]
        np.clip(pmf, 0.0, None, out=pmf)
    pmf /= pmf.sum()
    return pmf, grid


def sparse_distribution(cls: list[tuple[float, float]], max_points: int = 200_000):
    """Exact support and probabilities of K by enumerating job counts, when few combinations
    matter (e.g. widths far apart, where a lattice would blur the narrow ones); None otherwise."""
    from scipy.stats import poisson

    tails = [int(poisson.isf(1e-13, m)) + 1 if m > 0 else 0 for _, m in cls]
    if math.prod(n + 1 for n in tails) > max_points:
        return None
    dist: dict[float, float] = {0.0: 1.0}
    for (k, m), n_max in zip(cls, tails):
        pm = poisson.pmf(np.arange(n_max + 1), m)
        new: dict[float, float] = {}
        for v, p in dist.items():
            for n in range(n_max + 1):
                key = round(v + n * k, 9)
                new[key] = new.get(key, 0.0) + p * pm[n]
        dist = new
    values = np.array(sorted(dist))
    probs = np.array([dist[v] for v in values])
    return values, probs / probs.sum()


def occupancy(types, sol: RentSolution) -> Occupancy:
    cls = classes(types, sol)
    mean = sum(k * m for k, m in cls)
    var = sum(k * k * m for k, m in cls)
    exact = sparse_distribution(cls)
    if exact is not None:
        values, pmf = exact
        grid = 0.0
    else:
        pmf, grid = distribution(cls)
        values = np.arange(pmf.size) * grid
    cdf = np.cumsum(pmf)

    def quantile(q: float) -> float:
        return float(values[min(int(np.searchsorted(cdf, q - 1e-12)), values.size - 1)])
    p0 = math.exp(-sum(m for _, m in cls))
    notes = ["GPUs rented at a random moment: compound Poisson (M/G/inf insensitivity; needs Poisson "
             "arrivals, holds for any size distribution)"]
    if grid not in (0.0, 1.0):
        notes.append(f"fractional widths placed on a {grid:.3g}-GPU grid for the percentiles")
    return Occupancy(mean=mean, std=math.sqrt(var), p95=quantile(0.95), p99=quantile(0.99), p_zero=p0,
                     p_over_budget=float(pmf[values > mean * (1 + 1e-12) + grid / 2].sum()),
                     max_rate_classes=len(cls), grid=grid, assumptions=tuple(notes))
