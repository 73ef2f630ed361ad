"""Extended step-time form (gpuwise.estimate.fits.extended): Pollux terms (Qiao et al. OSDI'21 sec. 3.2)
plus a compute exponent and a node-count term, and the design rule for choosing <= 10 profiled points."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.estimate.fits.extended import ExtendedParams, fit_extended, from_pollux, predict_extended
from gpuwise.estimate.job_model import JobModel, PolluxStepTime
from gpuwise.estimate.fits import fit_form, predict
from gpuwise.estimate.fits.pollux import PolluxParams
from gpuwise.validation.throughput import DESIGN_PLAN, design_training_points
from gpuwise.workload.pollux_traces import APPLICATIONS, load_placements
from test_perf_pollux import random_layouts

POL = PolluxParams(0.05, 0.004, 0.30, 0.01, 0.08, 0.004, 2.0)
TRUE = ExtendedParams(0.05, 0.0015, 1.2, 0.30, 0.01, 0.08, 0.004, -0.3, 2.0, 0.2, -0.3)


def test_pollux_values_reproduce_pollux_predictions():
    """delta = 1, eta = 0 and no factors: identical to the 7-parameter form."""
    n, r, b = np.array([1, 1, 2, 3, 4]), np.array([1, 4, 2, 9, 16]), np.array([8, 64, 32, 128, 512])
    a, sa = predict(POL, n, r, b, 1)
    e, se = predict(from_pollux(POL), n, r, b, 1)
    assert np.allclose(a, e) and np.allclose(sa, se)


def test_fit_recovers_synthetic_extended_parameters():
    nodes, reps, bsz = random_layouts(1, 80, 512)
    step, sync = predict_extended(TRUE, nodes, reps, bsz)
    p = fit_extended(nodes, reps, bsz, step, sync)
    err = np.abs(predict_extended(p, nodes, reps, bsz)[0] - step) / step
    # alpha_c and delta trade off on noise-free data: held to 2% error and delta within 0.1
    assert np.median(err) < 0.02 and p.delta == pytest.approx(1.2, abs=0.1)


def test_priors_keep_few_points_at_pollux_values():
    """Two batch sizes on one GPU + one 2-node point cannot identify delta or eta: priors keep them at 1 and 0."""
    n, r, b = np.array([1, 1, 2]), np.array([1, 1, 2]), np.array([16, 128, 64])
    step, sync = predict(POL, n, r, b)
    p = fit_extended(n, r, b, step, sync)
    assert p.delta == pytest.approx(1.0, abs=0.05) and abs(p.eta) < 0.05


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 16), st.integers(1, 512))
def test_larger_batch_never_fewer_samples_per_step(nodes, reps, bsz):
    """Step time grows with the local batch (delta > 0): never shorter for a larger batch."""
    nodes = min(nodes, reps)
    s1, _ = predict_extended(TRUE, nodes, reps, bsz)
    s2, _ = predict_extended(TRUE, nodes, reps, bsz + 1)
    assert s2 >= s1 > 0


def test_bad_input_and_unknown_form():
    with pytest.raises(InputError):
        fit_extended([1], [1], [8], [0.1])
    with pytest.raises(InputError):
        fit_form("cubic", [1, 1], [1, 1], [8, 16], [0.1, 0.2])


def test_design_rule_covers_the_space():
    """<= 10 points: 1 GPU at min and max batch, one full node, 2 and 3 nodes, the most nodes with 1 and all GPUs."""
    for app in APPLICATIONS:
        rows = load_placements(app)
        pts = [rows[i] for i in design_training_points(rows)]
        assert len(pts) == len(DESIGN_PLAN) == 10
        assert {p.num_nodes for p in pts} == {1, 2, 3, 4}
        one = sorted(p.local_bsz for p in pts if p.placement == "1")
        sizes = sorted({r.local_bsz for r in rows if r.placement == "1"})
        assert one == [sizes[0], sizes[-1]]
        assert {"4", "4444", "1111"} <= {p.placement for p in pts}


def test_job_model_runs_on_extended_params():
    jm = JobModel.for_pollux_app("imagenet")
    ext = JobModel(PolluxStepTime(TRUE, "test"), jm.noise, jm.min_batch, jm.max_batch, jm.max_local_bsz)
    c = ext.best_batch(8)
    assert c is not None and c.step_time > 0 and "extended" in ext.describe()[0]
