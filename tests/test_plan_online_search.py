"""Scavenger online search (papers.md B.3) on a synthetic ground truth from the Pollux profiles.

Published reference: partial-search overhead vs the oracle +13% time / +9% cost (Scavenger Sec.
V-B, means over its jobs); the issue (4, scope 5) asks for <= 10% of both. We check the mean over
all 5 Pollux applications x 3 objectives, and every case of the jobs long enough for a ~5-minute
profiling phase to matter as in the paper (ImageNet ResNet-50, 41 h at the knee; YOLOv3, 3.3 h).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.errors import InputError
from gpuwise.estimate.fits import predict
from gpuwise.estimate.fits.pollux import PolluxParams
from gpuwise.plan.online_search import (Measurement, NoiseCurve, SearchConfig, choose,
                                        pollux_efficiency, scavenger_search)
from gpuwise.validation.scavenger_search import GroundTruthJob, demo as _run_demo, search_space

# The demo search is deterministic (seeded noise); several tests read the same (app, objective) runs, so each
# runs once per worker, and the tests sharing them run on one xdist worker (--dist loadgroup).
SHARED = pytest.mark.xdist_group("online_search")


@functools.lru_cache(maxsize=None)
def demo(app: str, objective: str, **kw):
    return _run_demo(app, objective, **kw)


@SHARED
@pytest.mark.parametrize("app", ["imagenet", "yolov3"])
@pytest.mark.parametrize("objective", ["knee", "time", "cost"])
def test_overhead_within_ten_percent(app, objective):
    d = demo(app, objective)
    assert d.overhead.time_overhead <= 0.10 and d.overhead.cost_overhead <= 0.10, d.overhead
    # the profiled extremes are few: Scavenger's partial search
    assert len(d.result.profiled) <= 6 < len(d.result.configs)


APPS = ("imagenet", "yolov3", "deepspeech2", "bert", "cifar10")


@SHARED
@pytest.mark.slow
def test_mean_overhead_over_all_cases_within_ten_percent():
    """Issue 4 Done means: mean search overhead <= 10% of the oracle's time AND cost over the 15
    app x objective cases (Scavenger reports means: +13% time, +9% cost). Measured here: 1.039 /
    1.038 with the 5% exploration budget, 1.052 / 1.109 profiling every extreme."""
    ratios = np.array([(1 + d.overhead.time_overhead, 1 + d.overhead.cost_overhead)
                       for d in (demo(a, o) for a in APPS for o in ("knee", "time", "cost"))])
    assert ratios.mean(axis=0).max() <= 1.10, ratios


@SHARED
def test_budget_skips_costly_profiles_of_a_short_job():
    """cifar10 (ResNet18, ~1 h on one T4 at minimum cost): profiling 16 GPUs for a restart and 20
    iterations costs more than 5% of the predicted rest of the job, so the budgeted search skips
    them, still picks the oracle, and costs less than profiling every extreme."""
    budgeted, every = demo("cifar10", "cost"), demo("cifar10", "cost", explore_fraction=None)
    assert {c.gpus for c in budgeted.result.skipped} >= {16} and not every.result.skipped
    assert budgeted.result.chosen == budgeted.overhead.oracle
    assert budgeted.overhead.total_cost_usd < every.overhead.total_cost_usd
    # profiles run cheapest first: the GPU counts never decrease
    ks = [c.gpus for c, _ in every.result.profiled]
    assert ks == sorted(ks)


@SHARED
def test_partial_search_finds_the_oracle_on_imagenet():
    for objective in ("knee", "time", "cost"):
        d = demo("imagenet", objective)
        assert d.result.chosen == d.overhead.oracle


def test_early_noise_alone_underrates_large_batches():
    # papers.md B.8: gradient noise is low early in training; trusting it alone picks a smaller
    # batch than the oracle's, and costs far more than the 10% target.
    d = demo("cifar10", "knee", use_prior=False)
    assert d.result.chosen.batch < d.overhead.oracle.batch
    assert d.overhead.time_overhead > 0.10


@SHARED
def test_full_mode_profiles_everything_and_predicts_better():
    part, full = demo("imagenet", "knee"), demo("imagenet", "knee", mode="full")
    assert len(full.result.profiled) == len(full.result.configs)
    truth = GroundTruthJob("imagenet", noise=0.0)
    t = np.array([truth.true_time(c, 0.0) for c in part.result.configs])
    err = lambda r: np.median(np.abs(r.predicted_time_s / t - 1))  # noqa: E731
    assert err(full.result) <= err(part.result) <= 0.10   # Fig. 11: partial error a few %


def test_search_space_respects_measured_local_batches():
    for c in search_space("cifar10"):
        assert 32 <= c.local_batch <= 1024 and c.nodes == math.ceil(c.gpus / 4)


P_TRUE = PolluxParams(alpha_c=0.02, beta_c=0.001, alpha_n=0.15, beta_n=0.01, alpha_r=0.05,
                      beta_r=0.004, gamma=1.6)


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(st.floats(1.0, 50.0), st.sampled_from(["time", "cost", "knee"]))
def test_exact_model_truth_is_recovered(noise_scale, objective):
    """When the truth *is* a Pollux model with constant noise, profiling the extremes recovers
    predictions within 5% and picks a configuration within 5% of the oracle's objective."""
    space = [SearchConfig(k, b, 4) for k in (1, 2, 4, 8, 16) for b in (64, 128, 256, 512, 1024)
             if 8 <= b / k <= 256]
    sqr, var = 1.0, noise_scale

    def run(cfg, iters):
        step, sync = predict(P_TRUE, cfg.nodes, cfg.gpus, cfg.local_batch)
        return Measurement(step, sync, sqr, var)

    res = scavenger_search(run, space, ref_batch=64, target_progress=1e5, price_per_gpu_hour=1.0,
                           objective=objective, restart_s=0.0)
    k = np.array([c.gpus for c in space], float)
    b = np.array([c.batch for c in space], float)
    step, _ = predict(P_TRUE, np.ceil(k / 4), k, b / k)
    t = 1e5 * 64 / (b * pollux_efficiency(b, 64, sqr, var)) * step
    c = t / 3600 * k
    assert np.max(np.abs(res.predicted_time_s / t - 1)) < 0.05
    i, o = space.index(res.chosen), choose(t, c, objective)
    metric = {"time": t, "cost": c, "knee": t * c}[objective]
    assert metric[i] <= metric[o] * 1.05 + 1e-12 or objective == "knee"


def test_budget_bounds_between_cold_start_and_every_extreme():
    """A zero budget leaves Scavenger's cold start only (the two single-GPU extremes, B.3 step 1);
    an unbounded one profiles every extreme, like the budget-free search; both cheapest first."""
    space = [SearchConfig(k, b, 4) for k in (1, 2, 4, 8, 16) for b in (64, 256, 1024) if 8 <= b / k <= 256]

    def run(cfg, iters):
        step, sync = predict(P_TRUE, cfg.nodes, cfg.gpus, cfg.local_batch)
        return Measurement(step, sync, 1.0, 10.0)

    kw = dict(ref_batch=64, target_progress=1e4, price_per_gpu_hour=1.0, objective="knee")
    none = scavenger_search(run, space, explore_fraction=0.0, **kw)
    assert [(c.gpus, c.batch) for c, _ in none.profiled] == [(1, 64), (1, 256)]
    assert len(none.skipped) == 4 and any("budget" in a for a in none.assumptions)
    every = scavenger_search(run, space, explore_fraction=1e9, **kw)
    free = scavenger_search(run, space, explore_fraction=None, **kw)
    assert {c for c, _ in every.profiled} == {c for c, _ in free.profiled} and len(free.profiled) == 6
    assert [c.gpus for c, _ in every.profiled] == sorted(c.gpus for c, _ in every.profiled)


def test_noise_curve_segments():
    nc = NoiseCurve(np.array([10.0, 20.0, 30.0]), np.ones(3), np.ones(3))
    assert nc.segment_lengths(0, 30).tolist() == [10, 10, 10]
    assert nc.segment_lengths(15, 40).tolist() == [0, 5, 20]   # last segment extends


def test_bad_settings_raise_input_error():
    with pytest.raises(InputError):
        scavenger_search(lambda c, i: None, [SearchConfig(1, 8), SearchConfig(2, 8)], ref_batch=8,
                         target_progress=1, price_per_gpu_hour=1, explore_fraction=-0.1)
    with pytest.raises(InputError):
        scavenger_search(lambda c, i: None, [SearchConfig(1, 8)], ref_batch=8, target_progress=1,
                         price_per_gpu_hour=1)
    with pytest.raises(InputError):
        scavenger_search(lambda c, i: None, [SearchConfig(1, 8), SearchConfig(2, 8)], ref_batch=8,
                         target_progress=1, price_per_gpu_hour=1, objective="fast")
