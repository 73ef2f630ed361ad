"""The shared discrete-event core."""

import math

import pytest
from hypothesis import given, strategies as st

from gpuwise.sim.engine import Engine, TimeAverage


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=200))
def test_events_come_out_in_time_order_and_ties_in_insertion_order(times):
    e = Engine()
    for i, t in enumerate(times):
        e.schedule(t, "x", i)
    out = []
    e.run({"x": lambda t, p: out.append((t, p))})
    assert out == sorted(((t, i) for i, t in enumerate(times)))


def test_cancel_and_until():
    e = Engine()
    tok = e.schedule(1.0, "x", "cancelled")
    e.schedule(2.0, "x", "kept")
    e.schedule(5.0, "x", "later")
    e.cancel(tok)
    seen = []
    e.run({"x": lambda t, p: seen.append(p)}, until=3.0)
    assert seen == ["kept"] and e.now == 3.0 and len(e) == 1


def test_cannot_schedule_in_the_past():
    e = Engine()
    e.schedule(2.0, "x")
    e.pop()
    with pytest.raises(ValueError):
        e.schedule(1.0, "x")


def test_time_average_of_a_step_function():
    ta = TimeAverage(start=0.0, level=0.0)
    ta.update(1.0, 4.0)   # 0 on [0,1), 4 on [1,3), 1 on [3,4)
    ta.update(3.0, 1.0)
    assert math.isclose(ta.integral(4.0), 9.0)
    assert math.isclose(ta.mean(4.0), 2.25)
    assert ta.peak == 4.0


def test_samples_keep_the_last_level_of_an_instant():
    # several jobs start at t=1: the plotted level is the one that lasts, not the first update
    ta = TimeAverage(start=0.0, level=0.0, sample_every=10.0)
    ta.update(1.0, 4.0)
    ta.update(1.0, 8.0)
    ta.update(1.0, 12.0)
    ta.update(2.0, 0.0)   # within sample_every of the last sample: not recorded
    assert ta.samples == [(1.0, 12.0)]
    assert math.isclose(ta.integral(2.0), 12.0)


def test_change_points_skip_unchanged_levels():
    ta = TimeAverage(start=0.0, level=0.0, sample_every=0.0)
    for now, level in [(1, 2), (2, 2), (3, 5), (3, 4), (4, 4), (5, 0)]:
        ta.update(float(now), float(level))
    assert ta.samples == [(1.0, 2.0), (3.0, 4.0), (5.0, 0.0)]
