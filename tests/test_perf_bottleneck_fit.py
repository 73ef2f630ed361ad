"""Bottleneck step-time form (gpuwise.estimate.fits.bottleneck): Pollux terms (Qiao et al. OSDI'21 sec. 3.2)
with the across-node all-reduce a power of GPUs per node, its own level and exponent on 2 nodes."""

from dataclasses import replace

import numpy as np
import pytest

from gpuwise.errors import InputError
from gpuwise.estimate.fits.bottleneck import BottleneckParams, fit_bottleneck, predict_bottleneck
from gpuwise.estimate.job_model import JobModel, PolluxStepTime
from gpuwise.estimate.fits import fit_form, predict
from test_perf_pollux import random_layouts

TRUE = BottleneckParams(alpha_c=0.05, beta_c=0.0015, delta=1.2, alpha_n=0.30, alpha_r=0.08, beta_r=0.004, eta=0.1,
                        gamma=2.0, two_node=0.2, kappa=0.3, kappa_two=0.5)


def test_network_shape():
    """One GPU per node has no GPUs-per-node factor; 2 nodes get their own level and steeper slope."""
    p = replace(TRUE, alpha_c=1e-9, beta_c=1e-12)   # negligible compute: exposed sync = the network time
    _, s11 = predict_bottleneck(p, 2, 2, 1e-9)
    _, s44 = predict_bottleneck(p, 2, 8, 1e-9)
    _, s1111 = predict_bottleneck(p, 4, 4, 1e-9)
    _, s4444 = predict_bottleneck(p, 4, 16, 1e-9)
    assert s11 == pytest.approx(0.30 * np.exp(0.2), rel=1e-3)
    assert s1111 == pytest.approx(0.30 * 2 ** 0.1, rel=1e-3)
    assert s44 / s11 == pytest.approx(4 ** 0.8, rel=1e-3) and s4444 / s1111 == pytest.approx(4 ** 0.3, rel=1e-3)
    a, _ = predict(TRUE, [1, 2, 4], [1, 8, 16], [8, 8, 8])   # dispatched by the fits registry
    assert np.allclose(a, [predict_bottleneck(TRUE, n, r, 8)[0] for n, r in ((1, 1), (2, 8), (4, 16))])


def test_fit_recovers_synthetic_parameters():
    nodes, reps, bsz = random_layouts(2, 80, 512)
    step, sync = predict_bottleneck(TRUE, nodes, reps, bsz)
    p = fit_form("bottleneck", nodes, reps, bsz, step, sync)
    err = np.abs(predict_bottleneck(p, nodes, reps, bsz)[0] - step) / step
    assert np.median(err) < 0.02
    assert p.kappa == pytest.approx(0.3, abs=0.15) and p.kappa_two == pytest.approx(0.5, abs=0.2)


def test_priors_keep_few_points_at_pollux_values():
    """1 GPU at two batches + one 2-node point identify neither delta, eta, kappa nor the 2-node terms."""
    n, r, b = np.array([1, 1, 2]), np.array([1, 1, 2]), np.array([16, 128, 64])
    step, sync = predict_bottleneck(TRUE, n, r, b)
    p = fit_bottleneck(n, r, b, step, sync)
    assert p.delta == pytest.approx(1.0, abs=0.1)   # true 1.2: held near the Pollux value
    assert max(abs(p.eta), abs(p.kappa), abs(p.kappa_two), abs(p.two_node)) < 0.05


def test_bad_input():
    with pytest.raises(InputError):
        fit_bottleneck([1], [1], [8], [0.1])
    with pytest.raises(InputError):
        fit_bottleneck([2, 1], [1, 1], [8, 16], [0.1, 0.2])   # more nodes than replicas


def test_job_model_runs_on_bottleneck_params():
    jm = JobModel.for_pollux_app("imagenet")
    m = JobModel(PolluxStepTime(TRUE, "test"), jm.noise, jm.min_batch, jm.max_batch, jm.max_local_bsz)
    c = m.best_batch(8)
    assert c is not None and c.step_time > 0 and "bottleneck" in m.describe()[0]
