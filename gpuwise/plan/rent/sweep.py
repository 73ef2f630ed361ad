"""E[T] and the optimal widths against the budget (the paper's Fig. 1 b, c)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuwise.errors import InputError
from gpuwise.plan.rent.solver import Budget, RentSolution, min_feasible_budget, solve


@dataclass(frozen=True)
class SweepResult:
    budgets: tuple[float, ...]            # feasible budgets solved
    solutions: tuple[RentSolution, ...]
    skipped: tuple[float, ...]            # requested budgets at or below the minimum feasible one
    min_budget: float


def parse_range(text: str, field: str = "--sweep") -> tuple[float, float, float]:
    """'LO:HI:STEP' -> (lo, hi, step)."""
    parts = str(text).split(":")
    try:
        lo, hi, step = (float(p) for p in parts)
    except ValueError:
        raise InputError(field, text, "use LO:HI:STEP, e.g. 0.85:3.2:0.05") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and step > 0 and hi >= lo and lo > 0):
        raise InputError(field, text, "need 0 < LO <= HI and STEP > 0, e.g. 0.85:3.2:0.05")
    if (hi - lo) / step > 10_000:
        raise InputError(field, text, "at most 10000 points; use a larger STEP")
    return lo, hi, step


def sweep(types, lo: float, hi: float, step: float, unit: str = "gpus", integer: bool = False,
          boot_delay: float = 0.0) -> SweepResult:
    floor_b = min_feasible_budget(types, Budget(1.0, unit), boot_delay)
    grid = lo + step * np.arange(int(math.floor((hi - lo) / step + 1e-9)) + 1)
    ok = [float(b) for b in grid if b > floor_b * (1 + 1e-9)]
    skipped = tuple(float(b) for b in grid if b <= floor_b * (1 + 1e-9))
    if not ok:
        raise InputError("--sweep", f"{lo:g}:{hi:g}:{step:g}",
                         f"every budget is infeasible; the minimum feasible budget is above {floor_b:.6g}")
    sols = tuple(solve(types, Budget(b, unit), integer=integer, boot_delay=boot_delay) for b in ok)
    return SweepResult(tuple(ok), sols, skipped, floor_b)


def plot(result: SweepResult, path: str, title: str = "") -> None:
    """Two panels like the paper's Fig. 1 (b) widths k_i(b), (c) E[T_i] dotted and E[T] against b."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = np.array(result.budgets)
    names = [a.name for a in result.solutions[0].types]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, name in enumerate(names):
        ax1.plot(b, [s.types[i].k for s in result.solutions], label=f"k ({name})")
        ax2.plot(b, [s.types[i].mean_response_time for s in result.solutions], ":", label=f"E[T] ({name})")
    ax2.plot(b, [s.mean_response_time for s in result.solutions], color="black", lw=2, label="E[T]")
    ax1.axhline(1.0, ls="--", color="grey", lw=0.8)
    unit = result.solutions[0].budget.units
    ax1.set(xlabel=f"budget b ({unit})", ylabel="optimal width k_i (GPUs)", yscale="log")
    ax2.set(xlabel=f"budget b ({unit})", ylabel="mean response time (h)")
    ax1.legend()
    ax2.legend()
    fig.suptitle(title or "optimal rental widths and response time against the budget")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
