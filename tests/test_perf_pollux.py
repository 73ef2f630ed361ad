"""Pollux step-time model (Qiao et al., OSDI'21, sec. 3.2) and its fit to the bundled profiles."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.estimate.fits import predict, relative_errors
from gpuwise.estimate.fits.online import OnlinePolluxFit
from gpuwise.estimate.fits.pollux import PolluxParams, fit_pollux
from gpuwise.validation.throughput import online_training_points, score_pollux_fit
from gpuwise.workload.pollux_traces import (APPLICATIONS, load_placements, load_scalability,
                                            load_validation, parse_placement)

TRUE = PolluxParams(alpha_c=0.05, beta_c=0.004, alpha_n=0.30, beta_n=0.01, alpha_r=0.08, beta_r=0.004,
                    gamma=2.0)


def test_loaders_read_every_application():
    for app in APPLICATIONS:
        rows = load_placements(app)
        assert len(rows) > 500 and all(r.step_time > 0 for r in rows)
        assert load_scalability(app)[0].num_replicas >= 6
        val = load_validation(app)
        assert len(val) >= 6 and list(val) == sorted(val)
    assert parse_placement("1222") == (4, 7)
    with pytest.raises(InputError):
        load_placements("resnet9000")


def test_fit_refuses_sync_times_of_another_length():
    """One clear InputError naming sync_time, not a numpy broadcasting traceback."""
    with pytest.raises(InputError, match="sync_time"):
        fit_pollux([1, 1, 2], [1, 1, 2], [16, 128, 64], [0.1, 0.5, 0.4], [0.0, 0.0])


def test_predict_limits():
    # one replica: no sync, step = compute
    step, sync = predict(TRUE, 1, 1, 32)
    assert sync == 0.0 and step == pytest.approx(0.05 + 0.004 * 32)
    # gamma = 1: no overlap, times add; accumulation adds whole micro-steps
    p1 = PolluxParams(0.05, 0.004, 0.3, 0.01, 0.08, 0.004, 1.0)
    step, sync = predict(p1, 2, 4, 32, grad_accum=3)
    comp, net = 0.05 + 0.004 * 32, 0.3 + 0.01 * 2
    assert step == pytest.approx(3 * comp + net) and sync == pytest.approx(net)
    # gamma large: near-perfect overlap, step -> max(compute, network)
    p10 = PolluxParams(0.05, 0.004, 0.3, 0.01, 0.08, 0.004, 10.0)
    step, _ = predict(p10, 2, 4, 32)
    assert step == pytest.approx(max(comp, net), rel=0.08)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 16), st.integers(1, 512))
def test_predict_monotone_in_batch(nodes, reps, bsz):
    """Larger local batch never shortens the step; step >= compute."""
    nodes = min(nodes, reps)
    s1, _ = predict(TRUE, nodes, reps, bsz)
    s2, _ = predict(TRUE, nodes, reps, bsz + 1)
    assert s2 >= s1 >= TRUE.alpha_c + TRUE.beta_c * bsz - 1e-12


def random_layouts(seed: int, count: int, max_bsz: int):
    """``count`` random data-parallel layouts: 1-4 nodes, 1-4 replicas per node, local batch 8..max_bsz-1."""
    rng = np.random.default_rng(seed)
    nodes = rng.integers(1, 5, count)
    return nodes, nodes * rng.integers(1, 5, count), rng.integers(8, max_bsz, count)


def test_fit_recovers_synthetic_parameters():
    nodes, reps, bsz = random_layouts(0, 60, 256)
    step, sync = predict(TRUE, nodes, reps, bsz)
    p = fit_pollux(nodes, reps, bsz, step, sync)
    err = relative_errors(p, nodes, reps, bsz, step)
    assert np.median(err) < 0.01 and p.beta_c == pytest.approx(TRUE.beta_c, rel=0.05)


def test_three_points_give_usable_model():
    """Priors: 1 GPU at two batches + one 2-node point already predicts other multi-node points
    within 20% (Pollux: usable from the first few profiles)."""
    nodes, reps, bsz = np.array([1, 1, 2]), np.array([1, 1, 2]), np.array([16, 128, 64])
    step, sync = predict(TRUE, nodes, reps, bsz)
    p = fit_pollux(nodes, reps, bsz, step, sync)
    qn, qr, qb = np.array([2, 2, 3]), np.array([2, 4, 6]), np.array([32, 64, 128])
    assert np.max(relative_errors(p, qn, qr, qb, predict(TRUE, qn, qr, qb)[0])) < 0.2


@pytest.mark.slow  # ten warm-started refits (5-15 s)
def test_online_update_matches_batch_fit():
    rows = load_placements("imagenet")
    online = OnlinePolluxFit()
    for i in online_training_points(rows):
        r = rows[i]
        online.observe(r.num_nodes, r.num_replicas, r.local_bsz, r.step_time, r.sync_time)
    assert online.num_points == 10
    a = np.array([(rows[i].num_nodes, rows[i].num_replicas, rows[i].local_bsz, rows[i].step_time,
                   rows[i].sync_time) for i in online_training_points(rows)])
    batch = fit_pollux(*a.T)
    test = [(r.num_nodes, r.num_replicas, r.local_bsz) for r in rows[::7]]
    tn, tr, tb = np.array(test).T
    pa, _ = predict(online.params, tn, tr, tb)
    pb, _ = predict(batch, tn, tr, tb)
    assert np.median(np.abs(pa - pb) / pb) < 0.02


# Held-out median |error| measured (fit on <= 10 points of the design rule, score every other placements.csv
# row of the Pollux OSDI'21 artifact profiles):
#   bottleneck form: bert 3.5%, cifar10 6.4%, deepspeech2 5.7%, imagenet 5.9%, ncf 6.7%, yolov3 6.0%
#   extended form, previous design rule (corners at min/mid/max batch): 3.9%, 6.7%, 5.9%, 5.9%, 7.0%, 6.8%
# Target (issue 3 "Done means", after Scavenger's < 5% model error): <= 5% on every app. It is NOT met on
# five apps: the bottleneck form's floor (fitted on *all* rows, in-sample) is already 3.7-5.4% on four of
# them, and single profiled points scatter 2-10% around any smooth function of (nodes, replicas, batch) --
# NCF's multi-node rows ~5% even around a free table per (nodes, replicas) plus a free compute per batch.
# The tolerance is the measured value + ~1 point so regressions fail; bert meets the 5% target and is held to it.
HELDOUT_TOLERANCE = {"bert": 0.045, "cifar10": 0.075, "deepspeech2": 0.067, "imagenet": 0.069, "ncf": 0.077,
                     "yolov3": 0.07}


@pytest.mark.parametrize("app", APPLICATIONS)
def test_heldout_error_on_pollux_profiles(app):
    """Bottleneck form on the design-rule points: held-out median within HELDOUT_TOLERANCE (see above)."""
    s = score_pollux_fit(app, form="bottleneck", rule="design", floor=False)
    assert s.train_points <= 10 and s.heldout_points > 500
    assert s.median_error <= HELDOUT_TOLERANCE[app]


def test_online_rule_still_scored():
    """The 7-parameter form on the online points keeps its measured held-out error (bert 3.7%, tol 5%)."""
    s = score_pollux_fit("bert", form="pollux", rule="online", floor=False)
    assert s.rule == "online" and s.median_error <= 0.05


def test_three_real_points_usable():
    """Priors make 3 measured points (1 GPU at two batches + one 2-node placement) usable on every
    bundled Pollux application: held-out median error measured 8-17%; tolerance 20%."""
    for app in APPLICATIONS:
        rows = load_placements(app)
        pick = []
        for pl, which in (("1", 0), ("1", -1), ("11", "mid")):
            idx = sorted((i for i, r in enumerate(rows) if r.placement == pl), key=lambda i: rows[i].local_bsz)
            pick.append(idx[len(idx) // 2] if which == "mid" else idx[which])
        a = np.array([(rows[i].num_nodes, rows[i].num_replicas, rows[i].local_bsz, rows[i].step_time,
                       rows[i].sync_time) for i in pick])
        p = fit_pollux(*a.T)
        test = np.array([(r.num_nodes, r.num_replicas, r.local_bsz, r.step_time) for i, r in enumerate(rows)
                         if i not in pick])
        assert np.median(relative_errors(p, *test.T)) < 0.20, app
