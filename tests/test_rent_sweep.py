"""Curves against the budget: the shape of Fig. 1 of Li et al. (papers.md A.4), exact features
from the closed form: type b pinned at k = 1 up to b = 0.88, the k-curves cross at b = 1.44
(k = 4), the per-type response times cross at b = 2; E[T] decreasing and convex in b."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
from gpuwise.plan.rent.solver import Budget, solve
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PowerSpeedup
from gpuwise.plan.rent.sweep import parse_range, plot, sweep

TYPES = [JobType("a", 0.4, SizeDistribution(), AmdahlSpeedup(0.8)), JobType("b", 0.4, SizeDistribution(), PowerSpeedup(0.5))]


def test_fig1_features():
    res = sweep(TYPES, 0.7, 3.2, 0.01)
    b = np.array(res.budgets)
    k1 = np.array([s.types[0].k for s in res.solutions])
    k2 = np.array([s.types[1].k for s in res.solutions])
    t1 = np.array([s.types[0].mean_response_time for s in res.solutions])
    t2 = np.array([s.types[1].mean_response_time for s in res.solutions])
    et = np.array([s.mean_response_time for s in res.solutions])
    assert res.skipped and max(res.skipped) <= 0.8 + 1e-9
    assert np.all(k2[b <= 0.88 - 1e-9] == pytest.approx(1.0, abs=1e-9))
    assert np.all(k2[b > 0.89] > 1.0)
    cross_k = b[np.argmax(k2 > k1)]          # first budget where the sqrt(k) type is wider
    assert 1.44 <= cross_k <= 1.45 + 1e-9
    cross_t = b[np.argmax(t2 < t1)]
    assert 2.0 <= cross_t <= 2.01 + 1e-9
    assert np.all(np.diff(et) < 0) and np.all(np.diff(et, 2) > -1e-9)  # decreasing, convex


@given(st.floats(0.81, 5.0), st.floats(0.01, 2.0))
@settings(max_examples=50, deadline=None)
def test_more_budget_never_hurts_and_binds(b, extra):
    lo, hi = solve(TYPES, Budget(b)), solve(TYPES, Budget(b + extra))
    assert hi.mean_response_time < lo.mean_response_time
    assert lo.budget_used == pytest.approx(b, rel=1e-9) and hi.budget_used == pytest.approx(b + extra, rel=1e-9)


def test_parse_range_and_plot(tmp_path):
    assert parse_range("0.85:3.2:0.05") == (0.85, 3.2, 0.05)
    for bad in ("1:2", "2:1:0.1", "1:2:0", "a:b:c"):
        with pytest.raises(InputError, match="--sweep"):
            parse_range(bad)
    with pytest.raises(InputError, match="minimum feasible"):
        sweep(TYPES, 0.1, 0.8, 0.1)
    out = tmp_path / "f.png"
    plot(sweep(TYPES, 0.85, 3.2, 0.05), str(out))
    assert out.stat().st_size > 1000
