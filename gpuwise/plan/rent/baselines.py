"""Baseline rental policies at the same long-run budget as pi*, for comparison in simulation.

- one-gpu: every job on 1 GPU (spends only sum rho_i; the budget is left unused);
- equal-width: one common width for every type, widened until the budget binds;
- greedy: whole-GPU widths grown one GPU at a time on the type with the best response-time
  saving per extra GPU-hour, while the budget allows (a natural hand-tuning procedure);
- size-aware: when sizes are known, width grows with the job's size (longer jobs wider), scaled
  so the expected spend meets the budget. pi* ignores sizes, and Theorem 1 says it still wins.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from gpuwise.plan.rent.solver import Budget, RentSolution, cost_per_work, spend_at
from gpuwise.policies.fixed_width import FixedWidthPolicy, SizeAwarePolicy


def one_gpu(types) -> FixedWidthPolicy:
    return FixedWidthPolicy.uniform([1.0] * len(types), "one-gpu")


def equal_width(types, budget: Budget, boot_delay: float = 0.0) -> FixedWidthPolicy:
    """The common width k (capped per type) at which the budget binds, by bisection on k."""
    w = budget.weights(types)
    caps = [t.speedup.cap for t in types]
    def ks(k):
        return [min(k, c) for c in caps]
    hi = 2.0
    while spend_at(types, w, ks(hi), boot_delay) < budget.amount and hi < 1e9 and any(hi < c for c in caps):
        hi *= 2
    lo = 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if spend_at(types, w, ks(mid), boot_delay) > budget.amount:
            hi = mid
        else:
            lo = mid
    return FixedWidthPolicy.uniform(ks(lo), "equal-width")


def greedy(types, budget: Budget, boot_delay: float = 0.0, max_steps: int = 200_000) -> FixedWidthPolicy:
    """Marginal allocation on whole GPUs (a heap of savings per unit of extra spend)."""
    w = budget.weights(types)
    ks = [1] * len(types)
    spent = spend_at(types, w, ks, boot_delay)
    def gain(i):
        t, k = types[i], ks[i]
        if k + 1 > t.speedup.cap:
            return None
        s0, s1 = float(t.speedup(k)), float(t.speedup(k + 1))
        d_obj = t.load * (1 / s0 - 1 / s1)
        d_cost = w[i] * t.load * (cost_per_work(t, k + 1, boot_delay) - cost_per_work(t, k, boot_delay))
        return d_obj / d_cost if d_cost > 1e-15 else math.inf, d_cost
    heap = []
    for i in range(len(types)):
        g = gain(i)
        if g:
            heapq.heappush(heap, (-g[0], i, g[1]))
    for _ in range(max_steps):
        if not heap:
            break
        neg, i, cost = heapq.heappop(heap)
        if spent + cost > budget.amount:
            continue  # this type's next GPU no longer fits; others might
        ks[i] += 1
        spent += cost
        g = gain(i)
        if g:
            heapq.heappush(heap, (-g[0], i, g[1]))
    return FixedWidthPolicy.uniform([float(k) for k in ks], "greedy")


def size_aware(types, budget: Budget, solution: RentSolution, rng: np.random.Generator | None = None,
               samples: int = 200_000, exponent: float = 1.0, boot_delay: float = 0.0) -> SizeAwarePolicy:
    """Widths proportional to size (around pi*'s widths), scale found by bisection so the
    expected spend, estimated on a size sample of each type, equals the budget."""
    rng = rng or np.random.default_rng(12345)
    w = budget.weights(types)
    base = tuple(a.k for a in solution.types)
    draws = [t.sizes.sample(rng, samples) for t in types]

    def spend(scale):
        total = 0.0
        for i, (t, x) in enumerate(zip(types, draws)):
            k = np.clip(scale * base[i] * (x / t.mean_size) ** exponent, 1.0, t.speedup.cap)
            total += w[i] * t.arrival_rate * float(np.mean(k * (boot_delay + x / t.speedup(k))))
        return total

    lo, hi = 1e-6, 1.0
    while spend(hi) < budget.amount and hi < 1e9:
        hi *= 2
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if spend(mid) > budget.amount:
            hi = mid
        else:
            lo = mid
    return SizeAwarePolicy("size-aware", base, tuple(t.mean_size for t in types),
                           tuple(t.speedup.cap for t in types), scale=lo, exponent=exponent)


def all_baselines(types, budget: Budget, solution: RentSolution, sizes_known: bool = True):
    """Every baseline at the budget (and boot delay) of `solution`."""
    d = solution.boot_delay
    out = [one_gpu(types), equal_width(types, budget, d), greedy(types, budget, d)]
    if sizes_known:
        out.append(size_aware(types, budget, solution, boot_delay=d))
    return out
