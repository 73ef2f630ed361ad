"""Rental policies for a stream of jobs on a pay-per-use cloud: each job gets a width on arrival
and keeps it until it completes (paper A.2 Definition 1).

A policy only answers "how many GPUs for this job", vectorised over jobs, so the cloud simulator
can assign widths in one numpy call and keep its event loop lean. Policies here depend only on
the job's type (and, for the size-aware heuristic, on its size), never on the system state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


class RentalPolicy(Protocol):
    name: str

    def assign(self, type_idx: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Width (GPUs) of each job, given its type index and size."""


@dataclass(frozen=True)
class FixedWidthPolicy:
    """Type i jobs get width k from `widths[i]` with the given probability. A type whose optimal
    width lies between two whole widths is randomised across its jobs (paper A.3.6)."""

    name: str
    widths: tuple[tuple[tuple[float, float], ...], ...]   # per type: ((width, fraction of jobs), ...)

    @classmethod
    def from_solution(cls, solution, name: str = "pi*") -> "FixedWidthPolicy":
        """From a `RentSolution` (gpuwise.plan.rent.solver)."""
        return cls(name, tuple(tuple(a.widths) for a in solution.types))

    @classmethod
    def uniform(cls, widths: Sequence[float], name: str) -> "FixedWidthPolicy":
        return cls(name, tuple(((float(k), 1.0),) for k in widths))

    def assign(self, type_idx, sizes, rng):
        out = np.empty(type_idx.shape, dtype=float)
        for i, choices in enumerate(self.widths):
            mask = type_idx == i
            if len(choices) == 1:
                out[mask] = choices[0][0]
            else:
                ks = np.array([k for k, _ in choices])
                ps = np.array([q for _, q in choices])
                out[mask] = rng.choice(ks, size=int(mask.sum()), p=ps / ps.sum())
        return out


@dataclass(frozen=True)
class SizeAwarePolicy:
    """Heuristic that knows job sizes: a job of size x of type i gets
    clip(scale * base[i] * (x / mean[i])**exponent, 1, cap[i]) GPUs — longer jobs get wider."""

    name: str
    base: tuple[float, ...]       # per-type width at the mean size
    mean: tuple[float, ...]       # per-type mean size
    cap: tuple[float, ...]        # per-type maximum width
    scale: float = 1.0            # common multiplier, tuned so the expected spend meets the budget
    exponent: float = 1.0         # how strongly width follows size
    integer: bool = False         # round widths to whole GPUs

    def assign(self, type_idx, sizes, rng):
        base = np.asarray(self.base)[type_idx]
        rel = sizes / np.asarray(self.mean)[type_idx]
        k = np.clip(self.scale * base * rel ** self.exponent, 1.0, np.asarray(self.cap)[type_idx])
        return np.maximum(np.floor(k), 1.0) if self.integer else k
