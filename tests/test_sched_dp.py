"""Elastic-scaling DP (Saxena et al., MASCOTS'20; papers.md C.4 / C.7).

Reproduces: the worked K = 4 example (optimum A = 3, B = 1, total 3.7; exact) and "the DP result
equals brute force on small instances" (exact, up to float rounding 1e-9).
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.policies.dp import brute_force, dp_allocate

NINF = -np.inf


def test_worked_example_papers_md_c7():
    va = np.array([NINF, 1.0, 1.9, 2.7, 3.4])
    vb = np.array([NINF, 1.0, 1.5, 1.8, 2.0])
    total, gs, idx = dp_allocate([va, vb], 4)
    assert idx == [0, 1] and gs == [3, 1]
    assert abs(total - 3.7) < 1e-12
    assert brute_force([va, vb], 4) == (total, gs)


@st.composite
def instances(draw):
    k = draw(st.integers(1, 9))
    jobs = draw(st.integers(1, 4))
    values = []
    for _ in range(jobs):
        gmax = draw(st.integers(1, k))
        vals = draw(st.lists(st.floats(0.0, 10.0, allow_nan=False), min_size=gmax, max_size=gmax))
        kmin = draw(st.integers(1, gmax))  # GPUs below the job's minimum are infeasible
        v = np.array([NINF] + vals)
        v[1:kmin] = NINF
        values.append(v)
    return values, k


@settings(max_examples=300, deadline=None)
@given(instances())
def test_dp_equals_brute_force(inst):
    values, k = inst
    total, gs, idx = dp_allocate(values, k)
    n = len(idx)
    assert idx == list(range(n))
    # the DP keeps the longest feasible prefix; brute force over that prefix must agree
    if n < len(values):
        bf_next, _ = brute_force(values[: n + 1], k)
        assert bf_next == NINF  # adding the next job really is infeasible
    if n == 0:
        return
    bf_total, _ = brute_force(values[:n], k)
    assert abs(total - bf_total) < 1e-9
    assert sum(gs) <= k and all(g >= 1 for g in gs)
    assert abs(sum(float(v[g]) for v, g in zip(values, gs)) - total) < 1e-9


def test_infeasible_prefix_is_cut():
    big = np.array([NINF, NINF, NINF, 5.0])  # needs 3 GPUs
    small = np.array([NINF, 1.0, 1.5])
    total, gs, idx = dp_allocate([small, big, small], 4)
    assert idx == [0, 1] and sorted(gs) == [1, 3]  # the third job no longer fits next to the first two


def test_prefix_stops_but_skip_goes_on():
    # K = 4: A takes 1 GPU; B needs 4 and cannot be fed next to A; C needs 1.
    a = np.array([NINF, 1.0])
    b = np.array([NINF, NINF, NINF, NINF, 9.0])
    c = np.array([NINF, 2.0, 3.0])
    _, gs, idx = dp_allocate([a, b, c], 4)
    assert idx == [0]  # strict FIFO: B blocks C
    total, gs, idx = dp_allocate([a, b, c], 4, skip=True)
    assert idx == [0, 2] and gs == [1, 2] and abs(total - 4.0) < 1e-12  # B alone is refused


@settings(max_examples=300, deadline=None)
@given(instances())
def test_skip_equals_greedy_brute_force(inst):
    # skip mode = take jobs in order, keep each one iff the brute-force optimum of the kept ones plus
    # it is feasible; the total equals brute force over the kept jobs
    values, k = inst
    total, gs, idx = dp_allocate(values, k, skip=True)
    kept: list[int] = []
    for j in range(len(values)):
        if brute_force([values[i] for i in kept + [j]], k)[0] > NINF:
            kept.append(j)
    assert idx == kept
    if kept:
        bf_total, _ = brute_force([values[i] for i in kept], k)
        assert abs(total - bf_total) < 1e-9
        assert sum(gs) <= k and all(g >= 1 for g in gs)
