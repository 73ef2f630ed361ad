"""Checkpoint interval (Young 1974 / Daly 2006) and expected time on spot with preemptions."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.estimate.preemption import checkpoint_seconds, spot_time, young_daly_interval


def test_young_daly_values():
    """Young: tau = sqrt(2*C*M). C = 60 s, M = 24 h -> sqrt(2*60*86400) = 3220 s (~54 min)."""
    assert young_daly_interval(60, 86400) == pytest.approx(3219.94, rel=1e-4)
    assert young_daly_interval(10, 3600) == pytest.approx(math.sqrt(72000))
    with pytest.raises(InputError):
        young_daly_interval(0, 10)


def test_young_daly_minimises_expected_time():
    """The first-order waste C/tau + tau/(2M) is minimal at Young's interval (grid check)."""
    c, m = 120.0, 5 * 3600.0
    taus = np.linspace(100, 20000, 4000)
    waste = c / taus + taus / (2 * m)
    assert taus[np.argmin(waste)] == pytest.approx(young_daly_interval(c, m), rel=0.01)


def test_no_preemptions_is_work_only():
    s = spot_time(3600.0, 0.0, 4, 30, 600)
    assert s.expected_s == s.p90_s == 3600.0 and s.expected_preemptions == 0


def test_monte_carlo_agrees_with_expectation():
    """Simulate Poisson preemptions with uniform lost work; mean wall time within 3% of the formula."""
    rng = np.random.default_rng(1)
    work, rate, nodes, c, r = 50 * 3600.0, 0.1, 2, 60.0, 300.0
    est = spot_time(work, rate, nodes, c, r)
    lam, tau = rate * nodes / 3600.0, est.interval_s
    walls = []
    for _ in range(4000):
        need, wall = work * (1 + c / tau), 0.0
        done = 0.0
        while True:
            t_fail = rng.exponential(1 / lam)
            if done + t_fail >= need:
                wall += need - done
                break
            lost = (done + t_fail) % (tau + c)
            done = done + t_fail - lost
            wall += t_fail + r
        walls.append(wall)
    assert np.mean(walls) == pytest.approx(est.expected_s, rel=0.03)
    assert est.p10_s <= np.median(walls) * 1.05 and est.p90_s >= np.median(walls) * 0.95


@settings(max_examples=50, deadline=None)
@given(st.floats(60, 1e6), st.floats(0.001, 0.2), st.integers(1, 16), st.floats(1, 600), st.floats(0, 1800))
def test_spot_time_properties(work, rate, nodes, c, r):
    try:
        s = spot_time(work, rate, nodes, c, r)
    except InputError:
        return  # preemptions faster than restarts: refused with a clear message
    assert s.p10_s <= s.p50_s <= s.p90_s
    assert s.expected_s >= work
    assert s.interval_s == pytest.approx(math.sqrt(2 * c * 3600 / (rate * nodes)))


def test_checkpoint_seconds():
    assert checkpoint_seconds(128, 1.0, 8) == 16.0


@settings(max_examples=40, deadline=None)
@given(work=st.floats(0.1, 2000), rate=st.floats(0.0, 0.5), nodes=st.integers(1, 32),
       ckpt=st.floats(1, 3000), restart=st.floats(0, 1800), deadline=st.floats(1, 5000))
def test_vectorised_equals_scalar(work, rate, nodes, ckpt, restart, deadline):
    """spot_times (numpy, used by the planner) reproduces spot_time row by row (same model, rel 1e-9);
    P(finish by deadline) >= 0.9 whenever the deadline is past p90."""
    from gpuwise.estimate.preemption import spot_times

    d = spot_times([work * 3600, 1.0], [rate, 0.0], [nodes, 1], [ckpt, 1.0], [restart, 0.0],
                   deadline_s=deadline * 3600)
    assert d.expected_s[1] == 1.0 and d.prob[1] == 1.0          # no preemptions: work only
    try:
        ref = spot_time(work * 3600, rate, nodes, ckpt, restart)
    except InputError:
        assert math.isinf(d.expected_s[0]) and d.prob[0] == 0.0
        return
    for got, want in ((d.expected_s, ref.expected_s), (d.p10_s, ref.p10_s), (d.p90_s, ref.p90_s),
                      (d.expected_preemptions, ref.expected_preemptions)):
        assert got[0] == pytest.approx(want, rel=1e-9)
    if deadline * 3600 >= ref.p90_s:
        assert d.prob[0] >= 0.9 - 1e-12


@settings(max_examples=40, deadline=None)
@given(st.floats(1e-6, 5e4), st.sampled_from([0.1, 0.5, 0.9]))
def test_numpy_poisson_quantile_matches_scipy(mu, q):
    from scipy.stats import poisson

    from gpuwise.estimate.preemption import poisson_ppf

    assert poisson_ppf(q, mu) == poisson.ppf(q, mu)


def test_import_is_cheap():
    """No scipy at import time of the preemption model (the planner's start-up budget)."""
    import subprocess
    import sys

    code = "import sys, gpuwise.estimate.preemption as p; p.spot_time(3600, 0.1, 2, 60, 300); " \
           "print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
