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
