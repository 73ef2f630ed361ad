"""The optimal fixed-width rental policy pi* (paper A.2, problem (3)) by Lagrangian bisection.

    minimise  sum_i rho_i / s_i(k_i)   subject to   sum_i w_i rho_i k_i / s_i(k_i) <= budget

with w_i = 1 for a budget in GPUs and w_i = price_i for a budget in USD per hour. For a
multiplier mu each type independently takes argmin_k (1 + mu w_i k)/s_i(k) (A.3.1); the spend
b(mu) does not increase with mu, so mu* is found by bisection on log mu. Widths that jump with mu
(integer mode, measured tables) are mixed across jobs so the budget binds exactly, with at most
one mixing type (A.3.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from gpuwise.errors import Infeasible, InputError
from gpuwise.plan.rent.jobtypes import JobType


@dataclass(frozen=True)
class Budget:
    """Long-run average budget."""

    amount: float          # GPUs (unit "gpus") or USD per hour (unit "usd_per_hour")
    unit: str = "gpus"     # "gpus" | "usd_per_hour"

    def label(self) -> str:
        return f"{self.amount:g} GPUs" if self.unit == "gpus" else f"${self.amount:g}/h"

    @property
    def units(self) -> str:
        """Unit name for messages: "GPUs" or "USD/h"."""
        return "GPUs" if self.unit == "gpus" else "USD/h"

    def weights(self, types: Sequence["JobType"]) -> list[float]:
        """Budget units one rented GPU-hour of each type costs: 1 (GPU budget) or its price (USD budget)."""
        return [t.price if self.unit == "usd_per_hour" else 1.0 for t in types]

    def refuse_at_or_below(self, floor: float, what: str, note: str = "") -> None:
        """InputError unless the budget exceeds `floor` (stability needs strictly more, eq. 2).

        what: what costs `floor` (e.g. "everything on 1 GPU already costs"); note: text after the number."""
        if self.amount <= floor * (1 + 1e-12):
            raise Infeasible("--budget", self.amount, f"infeasible: {what} {floor:.6g} {self.units}{note}; "
                             f"the minimum feasible budget is above {floor:.6g} {self.units}")


@dataclass(frozen=True)
class TypeAllocation:
    """The policy for one type and its consequences."""

    name: str
    widths: tuple[tuple[float, float], ...]  # (width, fraction of this type's jobs given it)
    k: float                                 # mean width per job
    speed: float                             # effective speedup: E[X]/E[T_i]
    mean_response_time: float                # E[T_i] = E[X_i] / s_i(k_i)
    mean_gpus: float                         # long-run GPUs rented for this type: rho_i k_i/s_i(k_i)
    spend: float                             # the same in budget units (GPUs or USD/h)
    at_cap: bool                             # width pinned at max_gpus
    at_one: bool                             # width clipped at 1 GPU


@dataclass(frozen=True)
class RentSolution:
    types: tuple[TypeAllocation, ...]
    mean_response_time: float       # E[T] = sum_i lambda_i E[T_i] / lambda
    mu: float                       # multiplier: d(sum rho_i/s_i)/d budget = -mu (0 if the budget is slack)
    frontier_slope: float           # dE[T]/d budget = -mu/lambda (envelope identity, A.3.1)
    budget: Budget
    budget_used: float              # spend in budget units
    mean_gpus: float                # long-run average GPUs rented
    min_budget: float               # sum w_i rho_i / s_i(1): the stability boundary
    integer: bool
    binding: bool                   # False when every type sits at its cap with budget to spare
    assumptions: tuple[str, ...]
    boot_delay: float = 0.0         # hours of billed boot per job the solution accounts for
    mu_range: tuple[float, float] = (0.0, 0.0)  # multipliers that all price the budget (whole widths)

    def widths(self) -> list[float]:
        return [t.k for t in self.types]


def check_types(types: Sequence[JobType]) -> None:
    """Refuse inputs the model cannot solve (A.3.4)."""
    if not types:
        raise InputError("types", [], "list at least one job type")
    for t in types:
        if t.speedup.is_linear and not math.isfinite(t.speedup.cap):
            raise InputError(f"{t.field_prefix}.max_gpus", None,
                             f"type {t.name!r} has a linear speedup, so any width is free and no optimum exists; "
                             "set max_gpus (the widest the job can use)")
        if not (t.arrival_rate > 0 and t.mean_size > 0):
            raise InputError(f"{t.field_prefix}.arrival_rate", t.arrival_rate, "arrival_rate and mean_size must be > 0")


def min_feasible_budget(types: Sequence[JobType], budget: Budget, boot_delay: float = 0.0) -> float:
    """sum w_i (rho_i + lambda_i d): everything on one GPU (plus its boot time d); the budget must
    exceed it (stability, eq. 2)."""
    w = budget.weights(types)
    return sum(wi * (t.load + t.arrival_rate * boot_delay) for wi, t in zip(w, types))


def cost_per_work(t: JobType, k: float, boot_delay: float = 0.0) -> float:
    """GPU-hours rented per unit of work at width k: k/s(k) (Lemma 2) plus the billed boot time
    of the k GPUs spread over the job's mean size."""
    return float(t.speedup.cost_per_work(k)) + boot_delay * k / t.mean_size


def _best_with_boot(t: JobType, mu_w: float, boot_delay: float, integer: bool) -> float:
    """argmin_k (1 + mu_w k)/s(k) + mu_w d k / E[X]: the per-type Lagrangian with a billed boot
    delay d. The added term is increasing, so the minimiser lies in [1, k(mu_w) without boot];
    for concave s the function is unimodal there (bounded Brent on log k)."""
    from scipy.optimize import minimize_scalar

    sp, c = t.speedup, mu_w * boot_delay / t.mean_size
    top = sp.best_width(mu_w)
    if integer or sp.is_piecewise_linear:
        # whole widths or breakpoints only: a job-level mix of two of them spends and saves
        # linearly between them, so the per-type Lagrangian is minimised at one of them (A.3.6)
        if integer:
            hi = int(math.floor(min(top, sp.cap))) if math.isfinite(min(top, sp.cap)) else 1
            ks = np.arange(1, max(hi, 1) + 1, dtype=float)
        else:
            ks = np.asarray(sp._points()[0], dtype=float)
            ks = ks[ks <= max(top, 1.0) + 1e-9]
        g = (1 + mu_w * ks) / sp(ks) + c * ks
        return float(ks[int(np.argmin(g))])
    if top <= 1.0:
        return 1.0
    f = lambda x: (1 + mu_w * math.exp(x)) / float(sp(math.exp(x))) + c * math.exp(x)
    r = minimize_scalar(f, bounds=(0.0, math.log(top)), method="bounded", options={"xatol": 1e-12})
    best = min((0.0, math.log(top), r.x), key=f)
    return math.exp(best)


def _width(t: JobType, mu_w: float, integer: bool, boot_delay: float = 0.0) -> float:
    if boot_delay > 0 and mu_w > 0:
        return _best_with_boot(t, mu_w, boot_delay, integer)
    return float(t.speedup.best_integer_width(mu_w)) if integer else t.speedup.best_width(mu_w)


def spend_at(types, w, ks, boot_delay: float = 0.0) -> float:
    """Long-run spend in budget units of widths `ks`: sum_i w_i rho_i cost_per_work_i(k_i)."""
    return sum(wi * t.load * cost_per_work(t, k, boot_delay) for t, wi, k in zip(types, w, ks))


def _spend(types, w, mu, integer, boot_delay=0.0) -> tuple[float, list[float]]:
    ks = [_width(t, mu * wi, integer, boot_delay) for t, wi in zip(types, w)]
    return spend_at(types, w, ks, boot_delay), ks


def bracket_mu(spent: Callable[[float], float], b: float, refusal: str) -> tuple[float, float]:
    """mu_lo < mu* <= mu_hi with spent(mu_lo) > b >= spent(mu_hi), to float precision.

    ``spent(mu)`` is the long-run spend of the per-type argmin widths at multiplier mu; it falls as mu
    rises (dearer GPUs -> narrower jobs). Bracket by factors of 4, then bisect geometrically.
    ``refusal`` is the InputError fix text when no finite mu meets the budget."""
    mu_lo, mu_hi = 1.0, 1.0
    while spent(mu_hi) > b:
        mu_hi *= 4.0
        if mu_hi > 1e300:
            raise Infeasible("--budget", b, refusal)
    while spent(mu_lo) <= b and mu_lo > 1e-300:
        mu_lo /= 4.0
    for _ in range(400):
        mid = math.sqrt(mu_lo * mu_hi)
        if not (mu_lo < mid < mu_hi):
            break
        if spent(mid) > b:
            mu_lo = mid
        else:
            mu_hi = mid
    return mu_lo, mu_hi


def _discrete(t: JobType, integer: bool) -> bool:
    return integer or t.speedup.is_piecewise_linear


def _solve_assumptions(types, budget: Budget, integer: bool, boot_delay: float) -> list[str]:
    """What every pi* rests on, plus the per-type speedups and the modes in force."""
    assumptions = [
        "fixed-width policy pi* (Li et al., arXiv:2406.15560, Thm 1): each job rents k_i GPUs on arrival and "
        "keeps them until done; no queueing",
        "budget holds as a long-run average only; instantaneous rental is bursty (see occupancy)",
        "optimal widths depend on sizes only through rho_i = lambda_i E[X_i] (any size distribution)",
        "time unit: hours (arrival rates per hour, sizes in single-GPU hours)",
    ]
    for t in types:
        assumptions.append(f"type {t.name}: {t.speedup.describe()}; rho={t.load:g}")
        for note in getattr(t.speedup, "notes", ()):
            assumptions.append(f"type {t.name}: {note} (the theory needs a concave speedup)")
    if budget.unit == "usd_per_hour":
        assumptions.append("USD budget: cost-weighted constraint sum rho_i p_i k_i/s_i(k_i) <= budget; prices "
                           + ", ".join(f"{t.name}=${t.price:g}/GPU-h" for t in types))
    if boot_delay > 0:
        assumptions.append(f"boot-aware: each job's GPUs are billed for a {boot_delay * 3600:g} s boot that also "
                           "delays it; widths minimise (1 + mu k)/s(k) + mu d k/E[X] (numerically)")
    if integer:
        assumptions.append("integer mode: whole-GPU widths; at most one type mixes two adjacent widths across "
                           "its jobs so the budget binds exactly (A.3.6)")
    return assumptions


def _hand_out_deficit(types, w, ks_hi, ks_lo, deficit: float, integer: bool, boot_delay: float):
    """Hand the budget left at mu_hi to the types whose width jumps at mu*, one at a time; the last
    one mixes its two widths across jobs (randomising = time-sharing, A.3.6). Returns (ks, mixes)."""
    mixes: list[tuple[float, float] | None] = [None] * len(types)
    ks = list(ks_hi)
    for i, t in enumerate(types):
        if deficit <= 0 or not (_discrete(t, integer) or boot_delay > 0) or ks_lo[i] == ks_hi[i]:
            continue
        ka, kb = ks_hi[i], ks_lo[i]
        if integer and kb - ka > 1:
            # whole widths mix adjacent ones (A.3.6); at very large widths (uncapped speedups) several widths tie
            # within the float precision of mu and the argmin can jump by more than one between mu_lo and mu_hi
            kb = ka + 1
        if not _discrete(t, integer) and abs(kb - ka) <= 1e-7 * ka:
            continue  # a continuous width: mu_lo and mu_hi agree to rounding
        delta = w[i] * t.load * (cost_per_work(t, kb, boot_delay) - cost_per_work(t, ka, boot_delay))
        if delta <= deficit:
            ks[i], deficit = kb, deficit - delta
        else:
            mixes[i] = (kb, deficit / delta)
            deficit = 0.0
    return ks, mixes


def _mu_upper_end(types, w, mu_hi: float, b: float, integer: bool, boot_delay: float) -> float:
    """Whole widths that spend exactly b stay optimal for a whole interval of mu: any value in it
    prices the budget (a subgradient). The interval's upper end, by doubling then bisection."""
    lo, hi = mu_hi, mu_hi
    while _spend(types, w, hi, integer, boot_delay)[0] >= b * (1 - 1e-12) and hi < 1e300:
        lo, hi = hi, hi * 4.0
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if not (lo < mid < hi):
            break
        if _spend(types, w, mid, integer, boot_delay)[0] >= b * (1 - 1e-12):
            lo = mid
        else:
            hi = mid
    return lo


def solve(types: Sequence[JobType], budget: Budget, integer: bool = False, boot_delay: float = 0.0) -> RentSolution:
    """Optimal widths for every type under the long-run budget (fractional or whole GPUs).

    ``boot_delay`` (hours, default 0 = the paper's model): each job's k GPUs are billed for a VM
    boot before it starts, which also adds to its response time."""
    check_types(types)
    if not (budget.amount > 0 and math.isfinite(budget.amount)):
        raise InputError("--budget", budget.amount, "must be a positive number")
    w = budget.weights(types)
    b = budget.amount
    if not (boot_delay >= 0 and math.isfinite(boot_delay)):
        raise InputError("--boot-delay", boot_delay, "must be >= 0")
    floor_b = min_feasible_budget(types, budget, boot_delay)
    unit = budget.units
    budget.refuse_at_or_below(floor_b, "everything on 1 GPU already costs",
                              f" (sum of rho_i{' + lambda_i x boot' if boot_delay else ''})")
    assumptions = _solve_assumptions(types, budget, integer, boot_delay)

    # Spend with mu = 0 is the most the caps allow; a bigger budget is slack.
    capped = all(math.isfinite(t.speedup.cap) or t.speedup.best_width(0.0) <= 1 for t in types)
    top, ks_top = _spend(types, w, 0.0, integer, boot_delay) if capped else (math.inf, [])
    if top <= b:
        return _finish(types, w, ks_top, [None] * len(types), 0.0, budget, floor_b, integer, False, boot_delay,
                       assumptions + [f"budget slack: every type at its cap uses {top:.6g} of {b:g} {unit}"])
    mu_lo, mu_hi = bracket_mu(lambda mu: _spend(types, w, mu, integer, boot_delay)[0], b,
                              f"cannot be met; minimum feasible budget is above {floor_b:.6g} {unit}")
    spend_hi, ks_hi = _spend(types, w, mu_hi, integer, boot_delay)
    _, ks_lo = _spend(types, w, mu_lo, integer, boot_delay)
    ks, mixes = _hand_out_deficit(types, w, ks_hi, ks_lo, b - spend_hi, integer, boot_delay)
    mu = math.sqrt(mu_lo * mu_hi)
    mu_range = (mu, mu)
    if all(m is None for m in mixes) and any(_discrete(t, integer) for t in types):
        lo = _mu_upper_end(types, w, mu_hi, b, integer, boot_delay)
        mu_range = (mu, lo)
        if lo > mu * (1 + 1e-9):
            assumptions.append(f"mu is not unique with whole widths: every value in [{mu:.6g}, {lo:.6g}] "
                               "prices the budget (reported: the lower end)")
    sol = _finish(types, w, ks, mixes, mu, budget, floor_b, integer, True, boot_delay, assumptions)
    return replace(sol, mu_range=mu_range)


def _finish(types, w, ks, mixes, mu, budget, floor_b, integer, binding, boot_delay, assumptions) -> RentSolution:
    lam = sum(t.arrival_rate for t in types)
    allocs = []
    used = gpus = weighted_t = 0.0
    for t, wi, k, mix in zip(types, w, ks, mixes):
        widths = ((k, 1.0),) if mix is None else ((k, 1.0 - mix[1]), (mix[0], mix[1]))
        u = sum(q / float(t.speedup(kk)) for kk, q in widths)          # hours per unit of work
        c = sum(q * cost_per_work(t, kk, boot_delay) for kk, q in widths)  # GPU-hours per unit of work
        et = boot_delay + t.mean_size * u
        allocs.append(TypeAllocation(
            name=t.name, widths=tuple((float(kk), float(q)) for kk, q in widths if q > 1e-12),
            k=float(sum(kk * q for kk, q in widths)), speed=t.mean_size / et, mean_response_time=et,
            mean_gpus=t.load * c, spend=wi * t.load * c,
            at_cap=math.isfinite(t.speedup.cap) and max(kk for kk, _ in widths) >= t.speedup.cap - 1e-9,
            at_one=all(kk <= 1 + 1e-12 for kk, _ in widths)))
        used += wi * t.load * c
        gpus += t.load * c
        weighted_t += t.arrival_rate * et
    return RentSolution(
        types=tuple(allocs), mean_response_time=weighted_t / lam, mu=mu, frontier_slope=-mu / lam + 0.0,
        budget=budget, budget_used=used, mean_gpus=gpus, min_budget=floor_b, integer=integer,
        binding=binding, assumptions=tuple(assumptions), boot_delay=boot_delay)
