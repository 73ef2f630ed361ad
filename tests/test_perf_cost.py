"""Cost identity (Scavenger eq. 5) and the affine step-time model (Scavenger eq. 8-10)."""

import numpy as np
import pytest

from gpuwise.errors import InputError
from gpuwise.estimate.cost import training_cost
from gpuwise.estimate.fits.affine import AffineStepTime, fit_affine, scavenger_time_cost

# Scavenger Fig. 10, ResNet18 (papers.md B.5, digitized): (B, K) -> (hours, dollars), p = $0.13402/h
FIG10_RESNET18 = {
    (384, 20): (6.8, 18.2), (384, 16): (7.35, 15.8), (384, 12): (9.15, 14.7), (384, 8): (12.4, 13.3),
    (512, 20): (6.15, 16.5), (512, 16): (6.6, 14.2), (512, 12): (7.65, 12.3), (512, 8): (10.5, 11.3),
    (768, 20): (4.8, 12.9), (768, 16): (5.2, 11.2), (768, 12): (6.5, 10.5), (768, 8): (9.55, 10.2),
    (1024, 20): (4.25, 11.4), (1024, 16): (4.6, 9.9), (1024, 12): (5.9, 9.5), (1024, 8): (8.7, 9.3),
}


def test_cost_identity_exact():
    assert training_cost(2.5, 3.0, 4) == 30.0
    for h, p, k in ((0.1, 0.13402, 7), (12.4, 98.32, 16)):
        assert training_cost(h, p, k) / (h * k) == pytest.approx(p, rel=1e-15)


@pytest.mark.parametrize("bk", sorted(FIG10_RESNET18))
def test_scavenger_fig10_costs(bk):
    """C = T*K*p reproduces every digitized Fig. 10 ResNet18 cost within reading error (+-3%)."""
    hours, dollars = FIG10_RESNET18[bk]
    assert training_cost(hours, 0.13402, bk[1]) == pytest.approx(dollars, rel=0.03)


def test_bad_cost_inputs():
    for args in ((-1, 1, 1), (1, -1, 1), (1, 1, 0)):
        with pytest.raises(InputError):
            training_cost(*args)


def test_affine_fit_recovers_and_time_cost():
    true = AffineStepTime(0.1, 0.002, 0.05, 0.02)
    K = np.array([8, 8, 12, 12, 16, 16, 20, 20])
    B = np.array([384, 1024, 384, 1024, 512, 768, 384, 1024])
    tau = true.tau(K, B)
    comp = 0.1 + 0.002 * B / K
    f = fit_affine(K, B, tau, comp)
    assert f.tau(10, 640) == pytest.approx(true.tau(10, 640))
    f2 = fit_affine(K, B, tau)
    assert f2.tau(10, 640) == pytest.approx(true.tau(10, 640))
    # Fig. 3 scale: tau 0.75-2 s; Fig. 10 (16, 1024): 4.6 h and $9.9 at $0.13402
    hours, usd = scavenger_time_cost(170, 50000, 1024, 0.6, 16, 0.13402)
    assert usd == pytest.approx(hours * 16 * 0.13402)
    assert f.step_time(1, 8, 48) == pytest.approx(true.tau(8, 384))


def test_affine_fit_bad_input_is_one_input_error():
    """Mismatched columns or non-positive workers: InputError naming the field, not a numpy traceback."""
    with pytest.raises(InputError, match="points"):
        fit_affine([1, 2, 4], [8, 16], [0.1, 0.2, 0.3])
    with pytest.raises(InputError, match="workers"):
        fit_affine([0, 2, 4], [8, 16, 32], [0.1, 0.2, 0.3])


def test_goodput_object_matches_planner_steps_and_memory():
    """The goodput object counts the planner's steps and fits what the memory entry point fits."""
    from gpuwise.estimate.goodput import JobGoodput
    from gpuwise.estimate.performance import memory_of
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.plan.job import from_jobspec as plan_job
    from gpuwise.workload.jobspec import load_job

    spec = load_job("examples/resnet50-imagenet.yaml")
    good = JobGoodput.from_jobspec(spec)
    pj = plan_job(spec)
    for gb in (256, 1024, 4096):
        assert good.space.noise.steps(gb) == pytest.approx(float(pj.noise.steps(gb)), rel=1e-12)
    one, eight = good.best("V100", 8, 1), good.best("V100", 8, 8)
    assert memory_of(spec.model_spec(), eight.config).fits(get_gpu("V100"))
    assert eight.goodput > one.goodput and good.speedup("V100", 8, 8) > 1.0
    with pytest.raises(InputError):
        good.best("not-a-gpu", 8, 1)
