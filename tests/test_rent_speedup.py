"""Speedup families of the rent solver: closed-form widths (papers.md A.3.2) and concave hulls
of measured tables (A.3.4, A.7 item 1)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PiecewiseLinearSpeedup, PowerSpeedup, from_mapping


@given(st.floats(0.05, 0.95), st.floats(1e-4, 10), st.sampled_from(["power", "amdahl"]))
@settings(max_examples=100, deadline=None)
def test_closed_form_width_is_the_grid_argmin(x, mu, kind):
    # A.3.1/A.3.2: k(mu) = argmin (1 + mu k)/s(k) on [1, cap]; checked on a fine log grid (rel 1e-3).
    sp = (PowerSpeedup(x) if kind == "power" else AmdahlSpeedup(x)).with_cap(1e4)
    ks = np.geomspace(1, 1e4, 200_001)
    g = (1 + mu * ks) / sp(ks)
    k_grid = ks[np.argmin(g)]
    k = sp.best_width(mu)
    assert (1 + mu * k) / float(sp(k)) <= g.min() * (1 + 1e-9)
    assert k == pytest.approx(k_grid, rel=2e-3)


@given(st.floats(0.05, 0.95), st.floats(1e-3, 5), st.sampled_from(["power", "amdahl"]))
@settings(max_examples=60, deadline=None)
def test_integer_width_is_the_integer_argmin(x, mu, kind):
    sp = (PowerSpeedup(x) if kind == "power" else AmdahlSpeedup(x)).with_cap(5000)
    ks = np.arange(1, 5001, dtype=float)
    g = (1 + mu * ks) / sp(ks)
    k = sp.best_integer_width(mu)
    assert (1 + mu * k) / float(sp(k)) == pytest.approx(g.min(), rel=1e-12)


def test_inverse_round_trips():
    for sp in (PowerSpeedup(0.5), AmdahlSpeedup(0.8), PiecewiseLinearSpeedup.from_table({1: 1, 2: 1.9, 4: 3.4})):
        k = np.array([1.0, 1.5, 3.0, 4.0])
        assert sp.inverse(sp(k)) == pytest.approx(k, rel=1e-12)


@given(st.lists(st.tuples(st.integers(2, 256), st.floats(0.0, 1.0)), min_size=1, max_size=12, unique_by=lambda t: t[0]))
@settings(max_examples=100, deadline=None)
def test_table_hull_is_concave_dominates_points_and_passes_through_1(points):
    # Table -> upper concave hull: concave, non-decreasing, >= every kept measurement, s(1) = 1.
    table = {1: 1.0}
    for k, frac in points:
        table[k] = 1.0 + frac * (k - 1)  # between 1 and linear
    sp = PiecewiseLinearSpeedup.from_table(table)
    w, s = np.array(sp.widths), np.array(sp.speeds)
    assert w[0] == 1 and s[0] == 1
    slopes = np.diff(s) / np.diff(w)
    assert np.all(np.diff(slopes) <= 1e-12) and np.all(slopes >= -1e-12)
    for k, v in table.items():
        if k <= sp.cap:
            assert float(sp(k)) >= v - 1e-9


def test_table_replaced_by_hull_with_a_note_and_truncated_at_fastest():
    sp = PiecewiseLinearSpeedup.from_table({1: 1.0, 2: 1.2, 4: 3.0, 8: 2.5})
    assert sp.widths == (1.0, 4.0) and sp.cap == 4
    assert any("hull" in n for n in sp.notes) and any("fastest" in n for n in sp.notes)


@pytest.mark.parametrize("value, match", [
    ({"power": 1.5}, r"speedup\.power"),
    ({"amdahl": "x"}, r"speedup\.amdahl"),
    ({"power": 0.5, "amdahl": 0.5}, "exactly one"),
    ({"table": {1: 1.0, 3: 3.5}}, "above linear"),
    ({"table": [1, 2]}, "map widths"),
])
def test_bad_speedups(value, match):
    with pytest.raises(InputError, match=match):
        from_mapping(value)


def test_linear_flags():
    assert PowerSpeedup(1.0).is_linear and AmdahlSpeedup(1.0).is_linear and from_mapping({"linear": True}).is_linear
    assert PowerSpeedup(1.0, cap=8).best_width(0.3) == 8
    assert not math.isfinite(PowerSpeedup(1.0).cap)
