"""Rental widths for a realistic cloud: whole GPUs, a billed VM boot, billing increments with a
minimum charge, and GPUs sold in instance sizes, all at once (paper A.7 item 2).

Billing rounds each rental up, so a job's cost is no longer k x (its work)/s(k) and the size
distribution matters, not only its mean. For each type and each candidate whole width k the
mean response time T(k) = d + E[X]/s(k) and the mean billed GPU-hours per job
C(k) = g(k) E[ceil(max(d + X/s(k), m)/q) q] (g = GPUs of the instances holding k, q the billing
increment, m the minimum charge) are tabulated, E[.] over a mid-quantile sample of the size law.
The problem min sum_i lambda_i T_i(k_i) s.t. sum_i w_i lambda_i C_i(k_i) <= b is then solved by
the same Lagrangian bisection as the paper's (per type argmin of T + mu w C), mixing at most one
type between two candidates across its jobs so the budget binds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gpuwise.errors import InputError
from gpuwise.plan.rent.instances import achievable_widths, instance_gpus
from gpuwise.plan.rent.jobtypes import JobType
from gpuwise.plan.rent.solver import Budget, RentSolution, TypeAllocation, bracket_mu, check_types, solve

MAX_WIDTH = 4096  # widest candidate for an uncapped type


@dataclass(frozen=True)
class Candidates:
    widths: np.ndarray   # policy widths (GPUs the job runs on)
    time: np.ndarray     # mean response time per job (hours)
    cost: np.ndarray     # mean billed GPU-hours per job


def billed_hours(duration: np.ndarray, increment: float, minimum: float) -> np.ndarray:
    """Billed hours of rentals lasting `duration` hours."""
    billed = np.maximum(duration, minimum)
    if increment > 0:
        billed = np.ceil(billed / increment - 1e-12) * increment
    return billed


def tabulate(t: JobType, kmax: int, boot: float, increment: float, minimum: float,
             instance_sizes: Sequence[int] | None, samples: int = 4096) -> Candidates:
    if instance_sizes:
        ks = np.array([k for k in achievable_widths(instance_sizes, kmax) if k <= kmax] or [1], dtype=float)
    else:
        ks = np.arange(1, kmax + 1, dtype=float)
    x = t.sizes.quantile_sample(samples)
    speed = np.asarray(t.speedup(ks), dtype=float)
    time = boot + t.mean_size / speed
    held = instance_gpus(ks, instance_sizes)
    cost = np.array([h * billed_hours(boot + x / s, increment, minimum).mean() for h, s in zip(held, speed)])
    return Candidates(ks, time, cost)


def _pick(c: Candidates, mu_w: float) -> int:
    return int(np.argmin(c.time + mu_w * c.cost))


def solve_realistic(types: Sequence[JobType], budget: Budget, boot: float = 0.0, increment: float = 0.0,
                    minimum: float = 0.0, instance_sizes: Sequence[int] | None = None) -> RentSolution:
    check_types(types)
    w = budget.weights(types)
    b = budget.amount
    unit = budget.units
    cands = []
    for t in types:
        cap = t.speedup.cap
        if math.isfinite(cap):
            kmax = int(math.floor(cap))
        else:  # the idealised optimum at a generous budget bounds the useful widths
            try:
                k_ideal = solve([t], Budget(max(b / w[0], t.load * 1.01) * 2, "gpus"), boot_delay=boot).types[0].k
            except InputError:
                k_ideal = 1.0
            kmax = int(min(MAX_WIDTH, max(16, math.ceil(4 * k_ideal))))
        cands.append(tabulate(t, kmax, boot, increment, minimum, instance_sizes))

    def spend(mu: float) -> tuple[float, list[int]]:
        js = [_pick(c, mu * wi) for c, wi in zip(cands, w)]
        return sum(wi * t.arrival_rate * c.cost[j] for t, c, wi, j in zip(types, cands, w, js)), js

    floor_b = sum(wi * t.arrival_rate * float(c.cost.min()) for t, c, wi in zip(types, cands, w))
    budget.refuse_at_or_below(floor_b, "with these billing rules the cheapest widths already cost")
    assumptions = [
        "realistic cloud: whole-GPU widths; per width, mean billed GPU-hours per job tabulated over a "
        "4096-point mid-quantile sample of each size law (billing makes the size distribution matter)",
        f"billing: boot {boot * 3600:g} s, increment {increment * 3600:g} s, minimum charge {minimum * 3600:g} s"
        + (", instances " + "/".join(map(str, instance_sizes)) if instance_sizes else ""),
    ]
    top, js_top = spend(0.0)
    mixes: list[tuple[int, float] | None] = [None] * len(types)
    if top <= b:
        return _finish(types, w, cands, js_top, mixes, 0.0, budget, floor_b, boot, False,
                       assumptions + [f"budget slack: the widest candidates use {top:.6g} of {b:g} {unit}"])
    mu_lo, mu_hi = bracket_mu(lambda mu: spend(mu)[0], b,
                              f"cannot be met; minimum feasible budget is above {floor_b:.6g} {unit}")
    spent, js = spend(mu_hi)
    _, js_lo = spend(mu_lo)
    deficit = b - spent
    for i, (t, c) in enumerate(zip(types, cands)):
        if deficit <= 0 or js[i] == js_lo[i]:
            continue
        delta = w[i] * t.arrival_rate * (c.cost[js_lo[i]] - c.cost[js[i]])
        if delta <= deficit:
            js[i], deficit = js_lo[i], deficit - delta
        else:
            mixes[i] = (js_lo[i], deficit / delta)
            deficit = 0.0
    return _finish(types, w, cands, js, mixes, math.sqrt(mu_lo * mu_hi), budget, floor_b, boot, True, assumptions)


def _finish(types, w, cands, js, mixes, mu, budget, floor_b, boot, binding, assumptions) -> RentSolution:
    lam = sum(t.arrival_rate for t in types)
    allocs, used, gpus, weighted = [], 0.0, 0.0, 0.0
    for t, c, wi, j, mix in zip(types, cands, w, js, mixes):
        parts = [(j, 1.0)] if mix is None else [(j, 1.0 - mix[1]), (mix[0], mix[1])]
        et = sum(q * c.time[jj] for jj, q in parts)
        cost = sum(q * c.cost[jj] for jj, q in parts)
        widths = tuple((float(c.widths[jj]), float(q)) for jj, q in parts if q > 1e-12)
        allocs.append(TypeAllocation(
            name=t.name, widths=widths, k=sum(k * q for k, q in widths), speed=t.mean_size / et,
            mean_response_time=et, mean_gpus=t.arrival_rate * cost, spend=wi * t.arrival_rate * cost,
            at_cap=math.isfinite(t.speedup.cap) and max(k for k, _ in widths) >= t.speedup.cap - 1e-9,
            at_one=all(k <= 1 for k, _ in widths)))
        used += wi * t.arrival_rate * cost
        gpus += t.arrival_rate * cost
        weighted += t.arrival_rate * et
    return RentSolution(
        types=tuple(allocs), mean_response_time=weighted / lam, mu=mu, frontier_slope=-mu / lam + 0.0,
        budget=budget, budget_used=used, mean_gpus=gpus, min_budget=floor_b, integer=True, binding=binding,
        assumptions=tuple(assumptions), boot_delay=boot, mu_range=(mu, mu))
