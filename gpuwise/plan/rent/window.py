"""Bounding spend over a finite window (beyond the paper, whose budget holds only on average).

Spend of a window of length W is attributed to the jobs arriving in it: each type-i job of
size X costs w_i k_i X / s_i(k_i) (GPU-hours, or USD with prices). With Poisson arrivals the
window's spend is compound Poisson, S_W = sum_i w_i c_i(b) Y_i with Y_i the total size of the
N_i ~ Poisson(lambda_i W) type-i arrivals and c_i(b) = k_i/s_i(k_i) the cost per unit of work
under the widths optimal for long-run budget b. The Y_i are drawn once (common random numbers),
so the spend quantile is monotone in b and the largest effective budget b' <= b whose
(1-eps)-quantile stays within the window bound is found by bisection. The response-time price of
the bound is E[T](b') - E[T](b).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuwise.errors import InputError
from gpuwise.plan.rent.solver import Budget, RentSolution, solve

_REPS = 20_000            # Monte-Carlo windows
_MAX_DRAWS = 20_000_000   # individual job sizes drawn before switching to a CLT per window


@dataclass(frozen=True)
class WindowResult:
    window: float                 # hours
    bound: float                  # allowed spend per window (budget units x hours)
    prob: float                   # required P(spend <= bound)
    p_exceed_at_budget: float     # P(spend > bound) under the long-run optimal policy
    spend_quantile_at_budget: float
    effective_budget: float       # b' (== budget when the bound already holds)
    feasible: bool                # False when even everything on 1 GPU breaks the bound
    mean_response_time: float     # E[T] at the long-run optimum
    bounded_response_time: float  # E[T] under b'
    widths: dict                  # type -> width under b'
    assumptions: tuple[str, ...]

    @property
    def price(self) -> float:
        return self.bounded_response_time - self.mean_response_time

    def as_dict(self) -> dict:
        return {"window_hours": self.window, "bound": self.bound, "prob": self.prob,
                "p_exceed_at_budget": self.p_exceed_at_budget,
                "spend_quantile_at_budget": self.spend_quantile_at_budget,
                "effective_budget": self.effective_budget, "feasible": self.feasible,
                "mean_response_time": self.bounded_response_time,
                "response_time_price": self.price,
                "response_time_price_pct": 100 * self.price / self.mean_response_time,
                "k": self.widths}

    def print(self) -> None:
        print(f"Window bound: spend <= {self.bound:.4g} per {self.window:g} h with probability {self.prob:g}")
        print(f"  long-run optimum: P(window over bound) = {self.p_exceed_at_budget:.4f}, "
              f"{self.prob:g}-quantile of spend = {self.spend_quantile_at_budget:.4g}")
        if not self.feasible:
            print("  infeasible: even every job on 1 GPU breaks the bound that often; raise the bound or lower the probability")
            return
        print(f"  policy meeting it: effective budget b' = {self.effective_budget:.4g}, widths "
              + ", ".join(f"{n}={k:.4g}" for n, k in self.widths.items()))
        print(f"  response-time price: E[T] {self.mean_response_time:.4g} -> {self.bounded_response_time:.4g} h "
              f"(+{100 * self.price / self.mean_response_time:.2f}%)")


def window_totals(types, window: float, rng: np.random.Generator, reps: int = _REPS) -> tuple[np.ndarray, str]:
    """reps x types matrix of the total work arriving per type in one window."""
    out = np.empty((reps, len(types)))
    methods = set()
    for i, t in enumerate(types):
        n = rng.poisson(t.arrival_rate * window, reps)
        d = t.sizes
        if d.kind == "exponential":  # a sum of n exponentials is Gamma(n)
            out[:, i] = np.where(n > 0, rng.gamma(np.maximum(n, 1), d.mean), 0.0)
            methods.add("exact (gamma sums)")
        elif d.kind == "deterministic":
            out[:, i] = n * d.mean
            methods.add("exact")
        elif n.sum() <= _MAX_DRAWS:
            draws = d.sample(rng, int(n.sum()))
            idx = np.repeat(np.arange(reps), n)
            out[:, i] = np.bincount(idx, weights=draws, minlength=reps)
            methods.add("exact (drawn sizes)")
        else:
            var = d.second_moment() - d.mean ** 2
            if not math.isfinite(var):
                raise InputError(f"{t.field_prefix}.size_distribution", d.describe(),
                                 "window too long for an infinite-variance size law; shorten --window")
            out[:, i] = np.maximum(rng.normal(n * d.mean, np.sqrt(n * var)), 0.0)
            methods.add("CLT per window (many jobs)")
    return out, ", ".join(sorted(methods))


def _cost_vector(types, sol: RentSolution) -> np.ndarray:
    """Spend (budget units) per unit of work of each type: w_i k_i/s_i(k_i)."""
    return np.array([a.spend / t.load for a, t in zip(sol.types, types)])


def bound_window(types, sol: RentSolution, window: float, bound: float | None = None, prob: float = 0.95,
                 integer: bool = False, seed: int = 0, resolve=None) -> WindowResult:
    """``resolve(b')`` re-solves the policy for a smaller long-run budget b' (default: `solve` with
    the same integer mode and boot delay as ``sol``); pass the solver that produced ``sol``."""
    if resolve is None:
        def resolve(amount: float) -> RentSolution:
            return solve(types, Budget(amount, sol.budget.unit), integer=integer, boot_delay=sol.boot_delay)
    if not (window > 0 and math.isfinite(window)):
        raise InputError("--window", window, "must be a positive number of hours, e.g. 24")
    budget = sol.budget
    bound = budget.amount * window if bound is None else bound
    if not bound > 0:
        raise InputError("--window-spend", bound, "must be positive")
    rng = np.random.default_rng(seed)
    totals, method = window_totals(types, window, rng)

    def quantile(s: RentSolution) -> float:
        return float(np.quantile(totals @ _cost_vector(types, s), prob))

    q_at_b = quantile(sol)
    p_exceed = float(np.mean(totals @ _cost_vector(types, sol) > bound))
    notes = [f"window spend: jobs charged to the window they arrive in (good when jobs are short against "
             f"{window:g} h); Poisson arrivals; {totals.shape[0]} simulated windows, {method}"]
    if any(len(a.widths) > 1 for a in sol.types):
        notes.append("window spend: a type mixing two widths is charged its mean cost per unit of work")
    base = dict(window=window, bound=bound, prob=prob, p_exceed_at_budget=p_exceed, spend_quantile_at_budget=q_at_b,
                mean_response_time=sol.mean_response_time)
    if q_at_b <= bound:
        return WindowResult(effective_budget=budget.amount, feasible=True, bounded_response_time=sol.mean_response_time,
                            widths={a.name: a.k for a in sol.types}, assumptions=tuple(notes), **base)
    lo = sol.min_budget * (1 + 1e-9)
    ones = resolve(lo * (1 + 1e-6))
    if quantile(ones) > bound:
        return WindowResult(effective_budget=math.nan, feasible=False, bounded_response_time=math.nan, widths={},
                            assumptions=tuple(notes), **base)
    lo, hi = lo * (1 + 1e-6), budget.amount
    best = ones
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        s = resolve(mid)
        if quantile(s) <= bound:
            lo, best = mid, s
        else:
            hi = mid
        if hi - lo < 1e-6 * budget.amount:
            break
    notes.append(f"window bound met by solving pi* for the smaller long-run budget b' = {lo:.6g}")
    return WindowResult(effective_budget=lo, feasible=True, bounded_response_time=best.mean_response_time,
                        widths={a.name: a.k for a in best.types}, assumptions=tuple(notes), **base)
