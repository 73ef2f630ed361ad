"""Optimal rental widths pi* (Li, Berg, Mukhopadhyay, Harchol-Balter, arXiv:2406.15560).

Reference values are the closed forms and test vectors of papers.md section A (A.4, A.5),
reproduced to 1e-6 unless stated otherwise.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
from gpuwise.plan.rent.solver import Budget, solve
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PiecewiseLinearSpeedup, PowerSpeedup


def fig1_types(size=SizeDistribution()):
    return [JobType("a", 0.4, size, AmdahlSpeedup(0.8)), JobType("b", 0.4, size, PowerSpeedup(0.5))]


def test_fig1_reference_point_b2():
    # A.4/A.5 item 1: b = 2 -> k = (6, 9), E[T] = 1/3, mu* = 1/9, E[T_1] = E[T_2] = 1/3.
    s = solve(fig1_types(), Budget(2.0))
    assert s.types[0].k == pytest.approx(6, abs=1e-6)
    assert s.types[1].k == pytest.approx(9, abs=1e-6)
    assert s.mean_response_time == pytest.approx(1 / 3, abs=1e-6)
    assert s.mu == pytest.approx(1 / 9, abs=1e-6)
    assert s.types[0].mean_response_time == pytest.approx(1 / 3, abs=1e-6)
    assert s.budget_used == pytest.approx(2.0, abs=1e-9)


def test_fig1_reference_point_b088_kink():
    # A.4: b = 0.88 -> mu* = 1, k = (2, 1), E[T_1] = 0.6, E[T_2] = 1, E[T] = 0.8.
    s = solve(fig1_types(), Budget(0.88))
    assert s.widths() == pytest.approx([2, 1], abs=1e-6)
    assert s.mu == pytest.approx(1.0, abs=1e-6)
    assert [a.mean_response_time for a in s.types] == pytest.approx([0.6, 1.0], abs=1e-6)
    assert s.mean_response_time == pytest.approx(0.8, abs=1e-6)


@pytest.mark.parametrize("b", np.linspace(0.9, 3.2, 24))
def test_fig1_closed_form_above_kink(b):
    # A.4: z = (b-0.32)/0.56; k1 = 2z, k2 = z^2, mu = 1/z^2, E[T] = 0.1 + 0.392/(b-0.32).
    z = (b - 0.32) / 0.56
    s = solve(fig1_types(), Budget(b))
    assert s.widths() == pytest.approx([2 * z, z * z], rel=1e-6)
    assert s.mu == pytest.approx(1 / z ** 2, rel=1e-6)
    assert s.mean_response_time == pytest.approx(0.1 + 0.392 / (b - 0.32), abs=1e-6)
    assert s.types[0].mean_response_time == pytest.approx(0.2 + 0.4 / z, abs=1e-6)
    assert s.types[1].mean_response_time == pytest.approx(1 / z, abs=1e-6)


@pytest.mark.parametrize("b", [0.81, 0.83, 0.85, 0.87])
def test_fig1_closed_form_below_kink(b):
    # A.4: 0.8 < b <= 0.88: k2 = 1 (clipped), k1 = (b-0.72)/0.08, E[T] = 0.6 + 0.032/(b-0.72).
    s = solve(fig1_types(), Budget(b))
    assert s.widths() == pytest.approx([(b - 0.72) / 0.08, 1.0], abs=1e-6)
    assert s.types[1].at_one
    assert s.mean_response_time == pytest.approx(0.6 + 0.032 / (b - 0.72), abs=1e-6)


def test_curves_cross_where_the_paper_says():
    # A.4: the k-curves cross at b = 1.44 (k = 4); response times cross at b = 2.
    s = solve(fig1_types(), Budget(1.44))
    assert s.widths() == pytest.approx([4, 4], abs=1e-6)


@pytest.mark.parametrize("b", [0.85, 1.2, 2.0, 2.7])
def test_frontier_slope_is_minus_mu_over_lambda(b):
    # A.3.1 envelope identity / A.5 item 3 (at b=2: -0.1389), central difference, rel 1e-5.
    h = 1e-5
    up, down, mid = (solve(fig1_types(), Budget(x)) for x in (b + h, b - h, b))
    slope = (up.mean_response_time - down.mean_response_time) / (2 * h)
    assert slope == pytest.approx(-mid.mu / 0.8, rel=1e-5)
    assert mid.frontier_slope == pytest.approx(slope, rel=1e-5)
    if b == 2.0:
        assert slope == pytest.approx(-0.1389, abs=5e-5)


def test_single_type_power_law():
    # A.5 item 2: rho = 0.5, b = 2, p = 0.5 -> k = 16, E[T] = E[X]/4.
    for mean in (0.25, 1.0, 7.0):
        t = JobType("x", 0.5 / mean, SizeDistribution(mean=mean), PowerSpeedup(0.5))
        s = solve([t], Budget(2.0))
        assert s.types[0].k == pytest.approx(16, abs=1e-6)
        assert s.mean_response_time == pytest.approx(mean / 4, rel=1e-9)


def test_size_distribution_does_not_change_the_policy():
    # A.5 item 4 (analytic half): only rho_i matters.
    ref = solve(fig1_types(), Budget(2.0))
    for dist in (SizeDistribution("deterministic"), SizeDistribution("lognormal", shape=1.5),
                 SizeDistribution("pareto", shape=2.2)):
        s = solve(fig1_types(dist), Budget(2.0))
        assert s.widths() == pytest.approx(ref.widths(), rel=1e-12)
        assert s.mean_response_time == pytest.approx(ref.mean_response_time, rel=1e-12)


@given(st.floats(0.05, 0.95), st.lists(st.floats(0.1, 10), min_size=2, max_size=5), st.floats(1.05, 20))
@settings(max_examples=40, deadline=None)
def test_identical_speedups_give_identical_widths(p, means, factor):
    # A.5 item 5: identical speedups -> identical widths, whatever the E[X_i].
    types = [JobType(f"t{i}", 0.3, SizeDistribution(mean=m), PowerSpeedup(p)) for i, m in enumerate(means)]
    b = factor * sum(t.load for t in types)
    ks = solve(types, Budget(b)).widths()
    assert max(ks) == pytest.approx(min(ks), rel=1e-7)


def test_infeasible_budget_names_the_minimum():
    # A.3.4 / A.5 item 6: b <= sum rho_i is refused with the minimum feasible budget.
    for b in (0.8, 0.5):
        with pytest.raises(InputError, match=r"minimum feasible budget is above 0\.8"):
            solve(fig1_types(), Budget(b))


def test_linear_without_cap_is_refused_and_capped_linear_goes_to_cap():
    # A.3.4 / A.7 item 5: no minimiser without a cap; with a cap the optimum is the cap.
    lin = JobType("lin", 0.4, SizeDistribution(), PowerSpeedup(1.0))
    with pytest.raises(InputError, match="max_gpus"):
        solve([lin, fig1_types()[1]], Budget(2.0))
    capped = JobType("lin", 0.4, SizeDistribution(), PowerSpeedup(1.0, cap=16))
    s = solve([capped, fig1_types()[1]], Budget(2.0))
    assert s.types[0].k == pytest.approx(16)
    # linear work costs rho regardless of width, so type b gets the rest: 0.4 + 0.4 k^0.5 = 2
    assert s.types[1].k == pytest.approx(16.0, rel=1e-6)


def test_slack_budget_puts_everyone_at_the_cap():
    # A.3.4: budget larger than the caps can use -> mu = 0, every type at k_max.
    types = [JobType("a", 0.4, SizeDistribution(), AmdahlSpeedup(0.8, cap=8)),
             JobType("b", 0.4, SizeDistribution(), PowerSpeedup(0.5, cap=4))]
    s = solve(types, Budget(100.0))
    assert s.widths() == [8, 4] and s.mu == 0 and not s.binding
    assert s.budget_used == pytest.approx(0.4 * (0.2 * 8 + 0.8) + 0.4 * 2)


def _convex_reference(types, b):
    """A.3.3: minimise sum rho_i u_i s.t. sum rho_i u_i s^-1(1/u_i) <= b, by SLSQP."""
    from scipy.optimize import minimize

    rho = np.array([t.load for t in types])
    lo = np.array([1 / float(t.speedup(min(t.speedup.cap, 1e6))) for t in types])
    cons = {"type": "ineq", "fun": lambda u: b - sum(r * x * float(t.speedup.inverse(1 / x))
                                                     for r, x, t in zip(rho, u, types))}
    res = minimize(lambda u: float(rho @ u), x0=np.full(len(types), 0.999), method="SLSQP",
                   bounds=[(l, 1.0) for l in lo], constraints=[cons], options={"ftol": 1e-13, "maxiter": 500})
    return float(rho @ res.x)


@given(st.lists(st.tuples(st.floats(0.1, 2.0), st.floats(0.2, 3.0), st.sampled_from(["power", "amdahl"]),
                          st.floats(0.3, 0.95)), min_size=1, max_size=4), st.floats(1.2, 6.0))
@settings(max_examples=30, deadline=None)
def test_bisection_matches_a_general_convex_solver(specs, factor):
    # A.3.3: the convex reformulation solved by SciPy's SLSQP agrees on the optimum (rel 1e-4).
    types = [JobType(f"t{i}", lam, SizeDistribution(mean=m),
                     (PowerSpeedup(x) if kind == "power" else AmdahlSpeedup(x)).with_cap(256))
             for i, (lam, m, kind, x) in enumerate(specs)]
    b = factor * sum(t.load for t in types)
    s = solve(types, Budget(b))
    lam = sum(t.arrival_rate for t in types)
    ref = _convex_reference(types, min(b, s.budget_used))
    assert s.mean_response_time * lam == pytest.approx(ref, rel=1e-4)
    assert s.budget_used <= b * (1 + 1e-9)


@given(st.lists(st.tuples(st.floats(0.1, 2.0), st.floats(0.3, 0.97), st.sampled_from(["power", "amdahl"])),
                min_size=1, max_size=4), st.floats(1.1, 8.0))
@settings(max_examples=40, deadline=None)
def test_integer_mode_mixes_at_most_one_type_and_binds(specs, factor):
    # A.3.6 / A.5 item 7: whole widths, at most one type mixing two adjacent widths, budget met exactly.
    types = [JobType(f"t{i}", lam, SizeDistribution(),
                     PowerSpeedup(x) if kind == "power" else AmdahlSpeedup(x))
             for i, (lam, x, kind) in enumerate(specs)]
    b = factor * sum(t.load for t in types)
    s = solve(types, Budget(b), integer=True)
    mixing = [a for a in s.types if len(a.widths) > 1]
    assert len(mixing) <= 1
    for a in s.types:
        assert all(k == int(k) for k, _ in a.widths)
        if len(a.widths) == 2:
            assert a.widths[1][0] - a.widths[0][0] == 1
    assert s.budget_used == pytest.approx(b, rel=1e-9)
    # whole GPUs can only cost response time relative to fractional widths
    assert s.mean_response_time >= solve(types, Budget(b)).mean_response_time * (1 - 1e-9)


def test_integer_mode_at_fig1_b2_is_the_fractional_optimum():
    # (6, 9) is already whole, so integer mode must return it unmixed.
    s = solve(fig1_types(), Budget(2.0), integer=True)
    assert [a.widths for a in s.types] == [((6.0, 1.0),), ((9.0, 1.0),)]


def test_heterogeneous_prices_scale_mu():
    # Cost-weighted budget: with one common price p, a USD budget B equals a GPU budget B/p
    # and the USD multiplier is mu_GPU / p.
    types = [JobType(t.name, t.arrival_rate, t.sizes, t.speedup, price=2.5) for t in fig1_types()]
    s = solve(types, Budget(5.0, "usd_per_hour"))
    assert s.widths() == pytest.approx([6, 9], abs=1e-6)
    assert s.mu == pytest.approx((1 / 9) / 2.5, rel=1e-6)
    # a pricier type gets fewer GPUs than at equal prices
    pricey = [JobType("a", 0.4, SizeDistribution(), AmdahlSpeedup(0.8), price=4.0),
              JobType("b", 0.4, SizeDistribution(), PowerSpeedup(0.5), price=1.0)]
    h = solve(pricey, Budget(2.0 * 2.5, "usd_per_hour"))
    assert h.budget_used == pytest.approx(5.0, rel=1e-9)
    # first-order condition per type with mu*p_i: a's width is sqrt(f/((1-f) mu p_a))
    assert h.types[0].k == pytest.approx(math.sqrt(0.8 / (0.2 * h.mu * 4.0)), rel=1e-6)


def test_table_speedup_uses_concave_hull_and_binds_by_mixing():
    # A.3.4: measured tables are replaced by their concave hull; breakpoints are the only
    # candidate widths, one type mixes two of them so the budget binds.
    sp = PiecewiseLinearSpeedup.from_table({1: 1.0, 2: 1.5, 3: 2.4, 4: 3.0})
    assert sp.widths == (1.0, 3.0, 4.0)
    t = JobType("m", 0.5, SizeDistribution(), sp)
    s = solve([t], Budget(0.55))
    assert len(s.types[0].widths) == 2 and s.budget_used == pytest.approx(0.55, rel=1e-12)
    assert {k for k, _ in s.types[0].widths} == {1.0, 3.0}
