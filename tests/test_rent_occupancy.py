"""GPUs rented at a random moment and finite-window spend (papers.md A.4 "Burstiness", A.7 item 3)."""

import math

import numpy as np
import pytest
from scipy.stats import poisson

from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
from gpuwise.plan.rent.occupancy import distribution, occupancy
from gpuwise.plan.rent.solver import Budget, solve
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PowerSpeedup
from gpuwise.plan.rent.window import bound_window


def fig1(dist=SizeDistribution()):
    return [JobType("a", 0.4, dist, AmdahlSpeedup(0.8)), JobType("b", 0.4, dist, PowerSpeedup(0.5))]


def test_fig1_burstiness():
    # A.4: K = 6 N1 + 9 N2, N_i ~ Poisson(0.1333): mean 2, sd ~ 3.95, P(K = 0) ~ 0.77.
    types = fig1()
    occ = occupancy(types, solve(types, Budget(2.0)))
    assert occ.mean == pytest.approx(2.0, abs=1e-9)
    assert occ.std == pytest.approx(math.sqrt(36 * 0.4 / 3 + 81 * 0.4 / 3), rel=1e-9)
    assert occ.std == pytest.approx(3.95, abs=0.005)
    assert occ.p_zero == pytest.approx(math.exp(-0.8 / 3), rel=1e-12)


def test_lattice_distribution_matches_brute_force():
    # Exact compound-Poisson pmf against direct enumeration of (N1, N2).
    cls = [(3.0, 0.7), (5.0, 1.3)]
    pmf, grid = distribution(cls)
    assert grid == 1.0
    ref = np.zeros(pmf.size)
    for n1 in range(60):
        for n2 in range(60):
            v = 3 * n1 + 5 * n2
            if v < ref.size:
                ref[v] += poisson.pmf(n1, 0.7) * poisson.pmf(n2, 1.3)
    assert pmf[:80] == pytest.approx(ref[:80], abs=1e-12)


def test_fractional_widths_use_a_grid():
    types = fig1()
    occ = occupancy(types, solve(types, Budget(3.0)))
    assert occ.grid <= 0.01 and occ.mean == pytest.approx(3.0)
    assert occ.p95 <= occ.p99 and occ.p_zero == pytest.approx(math.exp(-sum(
        t.arrival_rate * t.mean_size / float(t.speedup(a.k)) for t, a in zip(types, solve(types, Budget(3.0)).types))))


def test_window_deterministic_sizes_exact_quantile():
    # Deterministic sizes: window spend = sum_i c_i N_i with N_i Poisson(lambda_i W); one type makes
    # it c * N exactly, so P(spend > bound) is a Poisson tail (abs 0.01 for 2*10^4 windows).
    t = [JobType("x", 2.0, SizeDistribution("deterministic"), PowerSpeedup(0.5))]
    sol = solve(t, Budget(8.0))
    c = sol.types[0].spend / t[0].load  # GPU-hours per unit of work
    res = bound_window(t, sol, window=10.0, prob=0.9)
    assert res.p_exceed_at_budget == pytest.approx(poisson.sf(math.floor(80 / c + 1e-9), 20.0), abs=0.01)
    assert res.feasible and res.effective_budget < 8.0 and res.price > 0
    # the bounded policy meets the bound: 0.9-quantile of c' N <= 80
    c2 = res.effective_budget / t[0].load
    assert c2 * poisson.ppf(0.9, 20.0) <= 80 * (1 + 1e-6)


def test_window_bound_already_met_and_infeasible():
    types = fig1()
    sol = solve(types, Budget(2.0))
    loose = bound_window(types, sol, 24.0, bound=2.0 * 24 * 3, prob=0.95)
    assert loose.effective_budget == 2.0 and loose.price == 0
    tight = bound_window(types, sol, 24.0, bound=0.8 * 24, prob=0.95)
    assert not tight.feasible


def test_longer_windows_cost_less():
    # Averaging over longer windows tames the burstiness: the response-time price falls.
    types = fig1()
    sol = solve(types, Budget(2.0))
    prices = [bound_window(types, sol, w, prob=0.95).price for w in (24, 24 * 7, 24 * 30)]
    assert prices[0] > prices[1] > prices[2] > 0


def test_exact_enumeration_agrees_with_the_lattice_and_keeps_narrow_widths_sharp():
    from gpuwise.plan.rent.occupancy import sparse_distribution

    cls = [(3.0, 0.7), (5.0, 1.3)]
    values, probs = sparse_distribution(cls)
    pmf, _ = distribution(cls)
    for v, p in zip(values, probs):
        if v < pmf.size:
            assert p == pytest.approx(pmf[int(v)], abs=1e-12)
    # widths 64 and ~6e6 (b = 1000 in the Fig. 1 case with type a capped at 64): p95 is one
    # 64-GPU job, which a lattice fine enough for 6e6 GPUs would blur.
    types = [JobType("a", 0.4, SizeDistribution(), AmdahlSpeedup(0.8, cap=64)),
             JobType("b", 0.4, SizeDistribution(), PowerSpeedup(0.5))]
    occ = occupancy(types, solve(types, Budget(1000.0)))
    assert occ.p95 == 64.0 and occ.grid == 0.0
