"""Choosing by objective, and Scavenger's cost identity C = T*K*p on the Fig. 10 grid.

Fig. 10 (papers.md B.5, digitized): cost equals T x K x $0.13402 on every point "within reading
error"; we check within 3% (T is read to ~0.05 h, cost to $0.1 / $1).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.estimate.cost import training_cost
from gpuwise.plan.choose import choose

from test_plan_knee_pareto import FIG10, KS, PRICE


def test_cost_identity_on_fig10():
    worst = 0.0
    for model, grid in FIG10.items():
        for b, pts in grid.items():
            for k, (t, c) in zip(KS, pts):
                worst = max(worst, abs(training_cost(t, PRICE, k) / c - 1))
    assert worst < 0.03


def test_objectives_on_fig10_resnet18():
    pts = [(t, c, b, k) for b, row in FIG10["resnet18"].items() for k, (t, c) in zip(KS, row)]
    t = np.array([p[0] for p in pts])
    c = np.array([p[1] for p in pts])
    at = lambda i: (pts[i][2], pts[i][3])  # noqa: E731
    assert at(choose(t, c, "time")) == (1024, 20)
    assert at(choose(t, c, "cost")) == (1024, 8)
    assert at(choose(t, c, "knee")) == (1024, 16)     # papers.md B.5: knee of the global front
    # deadline: cheapest finishing within 6 h with probability >= 0.9
    prob = (t <= 6.0).astype(float)
    assert at(choose(t, c, "deadline", deadline_prob=prob)) == (1024, 12)
    assert choose(t, c, "deadline", deadline_prob=np.zeros_like(t)) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 1e3), st.floats(0.1, 1e5)), min_size=1, max_size=30))
def test_choices_are_optimal_and_knee_on_front(points):
    t, c = np.array(points).T
    assert c[choose(t, c, "cost")] == c.min()
    assert t[choose(t, c, "time")] == t.min()
    k = choose(t, c, "knee")
    assert not np.any((t <= t[k]) & (c <= c[k]) & ((t < t[k]) | (c < c[k])))   # non-dominated


def test_ties_break_on_the_other_metric():
    t = np.array([2.0, 1.0, 1.0])
    c = np.array([1.0, 5.0, 3.0])
    assert choose(t, c, "time") == 2
    t2 = np.array([1.0, 2.0, 3.0])
    c2 = np.array([4.0, 4.0, 4.0])
    assert choose(t2, c2, "cost") == 0
    with pytest.raises(ValueError):
        choose(t, c, "fastest")


def test_costs_within_the_tie_go_to_the_faster_then_fewer_nodes():
    t, c = np.array([10.0, 5.0, 4.0]), np.array([100.0, 100.9, 102.0])
    assert choose(t, c, "cost") == 0                       # no tolerance: strictly cheapest
    assert choose(t, c, "cost", cost_tie=0.01) == 1        # 0.9% dearer but twice as fast; 2% is not a tie
    t2 = np.array([5.0, 5.0])
    assert choose(t2, np.array([100.0, 100.5]), "cost", cost_tie=0.01, nodes=np.array([4, 2])) == 1
    prob = np.array([1.0, 0.0, 1.0])
    assert choose(t, c, "deadline", deadline_prob=prob, cost_tie=0.01) == 0   # the faster one misses
