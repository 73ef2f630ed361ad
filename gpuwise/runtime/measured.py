"""What the runtime learned about each job: the speed and efficiency model policies read.

Per job, every chunk adds one point (nodes, replicas, local batch, mean step time, mean sync time)
to the project's online Pollux fit (`gpuwise.estimate.pollux_fit.OnlinePolluxFit`) and one
gradient-noise measurement (|G|^2 and tr(Sigma), averaged with an exponential moving average, as
AdaptDL does). Progress is counted in steps at the job's reference batch M0 (its requested batch):
a step at batch M adds gain(M) = (M/M0) E(M), Pollux's AdaScale gain with the measured noise scale.

Before a job's first chunk the model is a prior (stated in the assumptions): a step-time form with
PRIOR_PARAMS and phi = M0. After one point the prior's compute terms are scaled to match it; from
two points on the fit takes over (with its own weak priors).

The fake GPU types of one machine are the same CPU cores, so a job has one model for all types.
`MeasuredPerf` is a `gpuwise.policies.base.PerfModel`; with ``segmented = False`` it is also the
ground truth the simulator replays a finished run on (`gpuwise.runtime.replay`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwise.estimate.pollux_fit import OnlinePolluxFit, PolluxParams, predict
from gpuwise.estimate.stat_efficiency import gain
from gpuwise.policies.base import JobState, job_batch_range

# prior step-time model (s): a small CPU model, ~2 ms/sample compute, ~10 ms all-reduce; an
# assumption used only until a job's first chunk is measured
PRIOR_PARAMS = PolluxParams(alpha_c=0.01, beta_c=0.002, alpha_n=0.02, beta_n=0.004, alpha_r=0.01,
                            beta_r=0.002, gamma=1.0)
MAX_LOCAL = {"tiny-gpt": 64, "tiny-resnet": 128}  # per-slot batch limit standing in for GPU memory
MIN_LOCAL = 2          # two half-batches per rank for the noise estimate
EMA = 0.7              # weight of the old value in the noise moving average


@dataclass
class JobModel:
    """One job's measured points and current model."""

    ref_batch: int
    fit: OnlinePolluxFit = field(default_factory=lambda: OnlinePolluxFit())
    params: PolluxParams = PRIOR_PARAMS
    grad_sqr: float | None = None
    grad_var: float | None = None
    points: list = field(default_factory=list)

    @property
    def phi(self) -> float:
        """Gradient noise scale (samples); the prior M0 until measured."""
        if self.grad_sqr is None or self.grad_var is None:
            return float(self.ref_batch)
        return max(self.grad_var, 0.0) / max(self.grad_sqr, 1e-12)

    def gain(self, batch) -> np.ndarray:
        # Pollux parametrisation: grad_var at M0 = tr(Sigma)/M0, so phi_pollux = M0*var/sqr = phi
        return gain(batch, self.phi, self.ref_batch)

    def observe(self, nodes: int, replicas: int, local: float, step_s: float, sync_s: float,
                big_sq: float, small_sq: float, big_b: float, small_b: float) -> None:
        self.points.append((nodes, replicas, local, step_s, sync_s))
        p = self.fit.observe(nodes, replicas, local, step_s, sync_s if replicas > 1 else 0.0)
        if p is not None:
            self.params = p
        else:  # one point: scale the prior's compute to it
            pred = float(predict(PRIOR_PARAMS, nodes, replicas, local)[0])
            k = step_s / pred
            self.params = replace(PRIOR_PARAMS, alpha_c=PRIOR_PARAMS.alpha_c * k, beta_c=PRIOR_PARAMS.beta_c * k)
        if big_b > small_b:
            sqr = (big_b * big_sq - small_b * small_sq) / (big_b - small_b)
            var = (small_sq - big_sq) / (1.0 / small_b - 1.0 / big_b)
            if self.grad_sqr is None:
                self.grad_sqr, self.grad_var = sqr, var
            else:
                self.grad_sqr = EMA * self.grad_sqr + (1 - EMA) * sqr
                self.grad_var = EMA * self.grad_var + (1 - EMA) * var

    def step_time(self, nodes, replicas, local) -> np.ndarray:
        return np.asarray(predict(self.params, nodes, replicas, local)[0], float)


class MeasuredPerf:
    """`PerfModel` over the runtime's measured job models (keyed by job name)."""

    segmented = False  # one constant rate per allocation (for the simulator's replay)

    def __init__(self, models: dict[str, JobModel], restart_s: float = 0.0) -> None:
        self.models = models

    def model(self, job) -> JobModel:
        return self.models[job.name]

    def batch_range(self, job, gpu_type: str) -> tuple[int, int, int]:
        m0 = int(job.batch_size)
        lo, hi = job_batch_range(job, m0, 4 * m0)
        return lo, hi, MAX_LOCAL[job.application]

    def goodput_grid(self, js: JobState, gpu_type: str, max_gpus: int, gpus_per_node: int,
                     batches: tuple[int, ...], accumulate: bool = False) -> np.ndarray:
        jm = self.model(js.job)
        limit = MAX_LOCAL[js.job.application]
        g = np.arange(1, max_gpus + 1, dtype=float)[:, None]
        nodes = np.ceil(g / max(1, gpus_per_node))
        b = np.asarray(batches, float)[None, :]
        local = b / g
        micro = np.maximum(1.0, np.ceil(local / limit)) if accumulate else np.ones_like(local)
        t = np.asarray(predict(jm.params, nodes, g, local / micro, micro - 1)[0], float)
        rate = jm.gain(b) / t / max(js.target, 1e-9)
        ok = (local >= MIN_LOCAL) & ((local <= limit) | accumulate)
        return np.where(ok, rate, 0.0)

    # -- the simulator's ground-truth interface (replay) ---------------------------------------
    def rates(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int | None) -> np.ndarray:
        jm = self.model(job)
        b = float(batch or job.batch_size)
        limit = MAX_LOCAL[job.application]
        micro = max(1.0, math.ceil(b / num_gpus / limit))
        t = float(predict(jm.params, num_nodes, num_gpus, b / num_gpus / micro, micro - 1)[0])
        return np.array([float(jm.gain(b)) / t])

    def target(self, job) -> float:
        return float(job.steps)

    def assumptions(self, apps) -> list[str]:
        return [f"speed: per-job online Pollux fit of measured step and sync times (prior before the first "
                f"chunk: {PRIOR_PARAMS}); efficiency: Pollux/AdaScale gain with the measured gradient noise "
                f"scale (EMA {EMA}); progress counted in steps at the job's requested batch",
                "the fake GPU types are the same CPU cores: one speed model per job for every type; per-slot "
                f"batch limits {MAX_LOCAL} stand in for GPU memory"]

    def describe(self) -> str:
        return "policies see the runtime's measured models (online Pollux fit + measured noise scale)"
