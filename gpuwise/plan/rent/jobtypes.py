"""Job types of a stream and their size distributions (paper A.1: type i has arrival rate
lambda_i, size X_i in single-GPU hours of work, and speedup s_i)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpuwise.plan.rent.speedup import Speedup

SIZE_KINDS = ("exponential", "deterministic", "lognormal", "pareto", "empirical")


@dataclass(frozen=True)
class SizeDistribution:
    """Job-size law with a given mean. The optimal widths depend only on the mean (paper A.2);
    the shape matters for simulation, window spend and heuristics that look at sizes."""

    kind: str = "exponential"            # one of SIZE_KINDS
    mean: float = 1.0                    # E[X], hours of single-GPU work
    shape: float | None = None           # lognormal: sigma of log X; pareto: tail index alpha > 1
    samples: tuple[float, ...] = field(default=(), repr=False)  # empirical: resampled with replacement

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        m = self.mean
        if self.kind == "exponential":
            return rng.exponential(m, n)
        if self.kind == "deterministic":
            return np.full(n, m)
        if self.kind == "lognormal":
            s = float(self.shape)
            return rng.lognormal(math.log(m) - s * s / 2, s, n)
        if self.kind == "pareto":
            a = float(self.shape)
            xm = m * (a - 1) / a
            return xm * (1.0 + rng.pareto(a, n))  # numpy's pareto is Lomax; shift to Pareto I
        if self.kind == "empirical":
            return rng.choice(np.asarray(self.samples, dtype=float), n)
        raise ValueError(self.kind)

    def quantile_sample(self, n: int = 4096) -> np.ndarray:
        """n sizes at the mid-quantiles (j + 1/2)/n, rescaled to the exact mean (the truncated
        tail would otherwise lose a little of it); the empirical law returns its samples."""
        if self.kind == "empirical":
            return np.asarray(self.samples, dtype=float)
        if self.kind == "deterministic":
            return np.array([self.mean])
        u = (np.arange(n) + 0.5) / n
        m = self.mean
        if self.kind == "exponential":
            x = -m * np.log1p(-u)
        elif self.kind == "lognormal":
            from scipy.stats import norm

            s = float(self.shape)
            x = np.exp(math.log(m) - s * s / 2 + s * norm.ppf(u))
        else:  # pareto
            a = float(self.shape)
            x = m * (a - 1) / a * (1 - u) ** (-1 / a)
        return x * (m / x.mean())

    def second_moment(self) -> float:
        """E[X^2] (inf for a Pareto tail with alpha <= 2)."""
        m = self.mean
        if self.kind == "exponential":
            return 2 * m * m
        if self.kind == "deterministic":
            return m * m
        if self.kind == "lognormal":
            return m * m * math.exp(float(self.shape) ** 2)
        if self.kind == "pareto":
            a = float(self.shape)
            if a <= 2:
                return math.inf
            xm = m * (a - 1) / a
            return a * xm * xm / (a - 2)
        return float(np.mean(np.square(self.samples)))

    def describe(self) -> str:
        if self.kind == "lognormal":
            return f"lognormal (sigma {self.shape:g})"
        if self.kind == "pareto":
            return f"Pareto (alpha {self.shape:g})"
        if self.kind == "empirical":
            return f"empirical ({len(self.samples)} samples)"
        return self.kind


@dataclass(frozen=True)
class JobType:
    """One job type of the stream."""

    name: str
    arrival_rate: float                  # lambda_i, jobs per hour
    sizes: SizeDistribution              # X_i; its mean is E[X_i]
    speedup: Speedup                     # s_i, already capped at max_gpus
    price: float = 1.0                   # USD per GPU-hour for this type (used with a USD budget)
    field_prefix: str = "types[0]"       # YAML path of this type, for error messages

    @property
    def mean_size(self) -> float:
        return self.sizes.mean

    @property
    def load(self) -> float:
        """rho_i = lambda_i E[X_i]: GPUs busy on average at width 1."""
        return self.arrival_rate * self.sizes.mean
