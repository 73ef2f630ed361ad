"""Ground-truth job speed from the measured Pollux profiles (OSDI'21 artifact traces).

Reproduces the measured step times of every placements.csv / scalability.csv row with the
interpolated model: median relative error <= 10% per application (tolerance of the interpolation,
printed); Pollux's statistical efficiency is 1 at the reference batch and <= 1 above it.
"""

import numpy as np
import pytest

from gpuwise.sim import ground_truth as gt
from gpuwise.workload.pollux_traces import APPLICATIONS, load_placements, load_scalability


@pytest.mark.parametrize("app", APPLICATIONS)
def test_step_time_reproduces_measurements(app):
    rows = load_placements(app) + load_scalability(app)
    n = np.array([r.num_nodes for r in rows])
    r_ = np.array([r.num_replicas for r in rows])
    m = np.array([r.local_bsz for r in rows])
    t = np.array([r.step_time for r in rows])
    err = np.abs(gt.step_time(app, "T4", n, r_, m) - t) / t
    print(f"{app}: median error {np.median(err):.3f} over {len(rows)} rows")
    assert np.median(err) <= 0.10


@pytest.mark.parametrize("app", APPLICATIONS)
def test_efficiency_and_progress(app):
    p = gt.app_profile(app)
    assert gt.efficiency(app, p.init_batch, 0.0) == pytest.approx(1.0)
    effs = gt.efficiency(app, np.array([p.init_batch * 2, p.max_batch]), p.target_progress / 2)
    assert np.all(effs <= 1.0 + 1e-12) and np.all(effs > 0)
    rates = gt.segment_rates(app, "T4", 4, 1, p.init_batch * 4)
    t = gt.time_to_progress(app, rates, 0.0, p.target_progress)
    assert np.isfinite(t) and t > 0
    # integrating back over the same time reaches the target (exact piecewise integration)
    assert gt.progress_after(app, rates, 0.0, t, p.target_progress) == pytest.approx(p.target_progress)
    half = gt.progress_after(app, rates, 0.0, t / 2, p.target_progress)
    assert gt.time_to_progress(app, rates, 0.0, half) == pytest.approx(t / 2, rel=1e-9)


def test_faster_gpu_is_faster_and_holds_more():
    t4 = gt.throughput("cifar10", "T4", 4, 1, 1024)
    a100 = gt.throughput("cifar10", "A100", 4, 1, 1024)
    assert a100 > t4 > 0
    assert gt.max_local_bsz("imagenet", "A100") > gt.max_local_bsz("imagenet", "T4")
    # a per-GPU batch beyond memory is infeasible unless the job accumulates gradients
    assert gt.throughput("imagenet", "T4", 1, 1, 800) == 0
    assert gt.throughput("imagenet", "T4", 1, 1, 800, accumulate=True) > 0
