"""Scavenger online search against a synthetic ground truth built from the Pollux profiles.

The job's real speed comes from `gpuwise.sim.ground_truth` (measured T4 step times of a Pollux
application, its measured multi-GPU overheads, and its gradient statistics along training);
`scavenger_search` sees it only through short profiling runs, as it would on a cloud.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.plan.online_search import (EXPLORE_FRACTION, Measurement, NoiseCurve, Overhead, SearchConfig,
                                        SearchResult, scavenger_search, search_overhead)
from gpuwise.workload.pollux_traces import load_validation
from gpuwise.sim import ground_truth as gt


class GroundTruthJob:
    """A stateful job: profiling runs advance its progress, like real training would.

    app: Pollux application; gpu: GPU type (the profiles are T4); noise: relative std of the
    measured step time and gradient statistics per profiling run; seed: for that noise.
    """

    def __init__(self, app: str = "cifar10", gpu: str = "T4", noise: float = 0.03, seed: int = 0):
        self.app, self.gpu, self.noise = app, gpu, noise
        self.profile = gt.app_profile(app)
        self.progress = 0.0
        self.rng = np.random.default_rng(seed)

    def _jitter(self) -> float:
        return float(np.exp(self.rng.normal(0.0, self.noise))) if self.noise > 0 else 1.0

    def run(self, cfg: SearchConfig, iterations: int) -> Measurement:
        p = self.profile
        step = float(gt.step_time(self.app, self.gpu, cfg.nodes, cfg.gpus, cfg.local_batch))
        comp = float(gt.step_time(self.app, self.gpu, 1, 1, cfg.local_batch))
        i = gt.segment_index(p, self.progress)
        eff = float(gt.efficiency(self.app, cfg.batch, self.progress))
        self.progress = min(p.target_progress, self.progress + iterations * cfg.batch * eff / p.init_batch)
        j = self._jitter()
        return Measurement(step * j, max(step - comp, 0.0) * j, p.grad_sqr[i] * self._jitter(),
                           p.grad_var[i] * self._jitter())

    def true_time(self, cfg: SearchConfig, start_progress: float) -> float:
        rates = gt.segment_rates(self.app, self.gpu, cfg.gpus, cfg.nodes, cfg.batch)
        return gt.time_to_progress(self.app, rates, start_progress, self.profile.target_progress)


def search_space(app: str = "cifar10", gpu: str = "T4", gpus=(1, 2, 4, 8, 12, 16),
                 gpus_per_node: int = 4) -> list[SearchConfig]:
    """(K, B): B = the validated global batches of the app, K GPUs, local batch within the
    measured range (no accumulation)."""
    p = gt.app_profile(app)
    hi = gt.max_local_bsz(app, gpu)
    batches = [p.init_batch * 2 ** i for i in range(0, 32) if p.init_batch * 2 ** i <= p.max_batch]
    return [SearchConfig(k, b, gpus_per_node) for k in gpus for b in batches
            if p.min_local_bsz <= b / k <= hi]


@dataclass(frozen=True)
class Demo:
    result: SearchResult
    overhead: Overhead
    target_progress: float


def prior_run(app: str) -> NoiseCurve:
    """Gradient statistics of an *earlier* run of the same model at another batch (the second
    smallest validated batch) -- not the run the ground truth follows (the smallest, M0)."""
    val = load_validation(app)
    rows = val[sorted(val)[1]]
    return NoiseCurve(np.array([r.progress for r in rows]), np.array([max(r.grad_sqr, 1e-30) for r in rows]),
                      np.array([max(r.grad_var, 0.0) for r in rows]))


def demo(app: str = "cifar10", objective: str = "knee", price_per_gpu_hour: float = 0.526,
         mode: str = "partial", seed: int = 0, noise: float = 0.03, restart_s: float = 37.0,
         use_prior: bool = True, explore_fraction: float | None = EXPLORE_FRACTION) -> Demo:
    """Run the search on the synthetic job and compare with the oracle.

    price_per_gpu_hour: default AWS g4dn.xlarge on-demand (1 x T4), the GPU of the profiles.
    use_prior: give the search the noise curve of an earlier run (`prior_run`).
    explore_fraction: partial search's exploration budget (None: profile every extreme).
    """
    job = GroundTruthJob(app, noise=noise, seed=seed)
    space = search_space(app)
    res = scavenger_search(job.run, space, ref_batch=job.profile.init_batch,
                           target_progress=job.profile.target_progress,
                           price_per_gpu_hour=price_per_gpu_hour, objective=objective, mode=mode,
                           restart_s=restart_s, noise_prior=prior_run(app) if use_prior else None,
                           explore_fraction=explore_fraction)
    fresh = GroundTruthJob(app, noise=0.0)
    return Demo(res, search_overhead(res, fresh.true_time, price_per_gpu_hour),
                job.profile.target_progress)
