"""What the runtime learned about each job: the speed and efficiency model policies read.

Per job, every chunk adds one point (nodes, replicas, local batch, mean step time, mean sync time);
the project's Pollux fit (`gpuwise.estimate.pollux_fit.fit_pollux`) runs on the per-configuration means and one
gradient-noise measurement (|G|^2 and tr(Sigma), averaged with an exponential moving average, as
AdaptDL does). Progress is counted in steps at the job's reference batch M0 (its requested batch):
a step at batch M adds gain(M) = (M/M0) E(M), Pollux's AdaScale gain with the measured noise scale.

Before a job's first chunk the model is a prior (stated in the assumptions): a step-time form with
PRIOR_PARAMS and phi = M0. After one point the prior's compute terms are scaled to match it; from
two distinct configurations on the fit takes over (with its own weak priors).

Jobs with a goodput object (`gpuwise.runtime.measurements.job_goodput`: a job spec's, or a built-in
model's) have a second, measured model: the goodput object the planner and the policies ask, its
step time calibrated on the measured chunks (`gpuwise.estimate.calibration`). Policies read it
while it is calibrated on the GPU type and the Pollux fit is still its prior scaled to one
configuration (the goodput object then knows how step time moves with width and batch from its
layout/roofline model, the prior only from hand-set constants); from two measured configurations
on, the Pollux fit of the measurements themselves.

The fake GPU types of one machine are the same CPU cores, so a job has one model for all types.
`MeasuredPerf` is a `gpuwise.policies.base.PerfModel`; with ``segmented = False`` it is also the
ground truth the simulator replays a finished run on (`gpuwise.runtime.replay`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwise.estimate.stat_efficiency import gns_moments
from gpuwise.estimate.pollux_fit import PolluxParams, fit_pollux, predict
from gpuwise.estimate.stat_efficiency import gain
from gpuwise.policies.base import JobState, job_batch_range
from gpuwise.runtime.small_models import small_model, small_models

# prior step-time model (s): a small CPU model, ~2 ms/sample compute, ~10 ms all-reduce; an
# assumption used only until a job's first chunk is measured
PRIOR_PARAMS = PolluxParams(alpha_c=0.01, beta_c=0.002, alpha_n=0.02, beta_n=0.004, alpha_r=0.01,
                            beta_r=0.002, gamma=1.0)


def max_local(app: str) -> int:
    """Per-slot batch limit standing in for GPU memory (the model file's max_local_batch)."""
    return small_model(app).max_local_batch


def _limit(job) -> int:
    """Per-slot batch limit of a job: a script or model job's own, else its small model's."""
    return getattr(job, "max_local_batch", None) or max_local(job.application)


MIN_LOCAL = 2          # two half-batches per rank for the noise estimate
EMA = 0.7              # weight of the old value in the noise moving average


@dataclass
class OnlineFit:
    """One job's measured points and its current online fit (Pollux step-time parameters, noise
    scale); policies read it as the shared fitted model, `MeasuredPerf.fitted`."""

    ref_batch: int
    params: PolluxParams = PRIOR_PARAMS
    grad_sqr: float | None = None
    grad_var: float | None = None
    points: list = field(default_factory=list)
    trained: dict = field(default_factory=dict)  # global batch -> steps trained at it
    phi_override: float | None = None            # the replay's effective noise scale
    fitter: object = None      # a concurrent.futures executor: fits run off the controller's thread
    _pending: object = None    # Future of the fit in flight

    @property
    def phi(self) -> float:
        """Gradient noise scale (samples); the prior M0 until measured."""
        if self.phi_override is not None:
            return self.phi_override
        if self.grad_sqr is None or self.grad_var is None:
            return float(self.ref_batch)
        return max(self.grad_var, 0.0) / max(self.grad_sqr, 1e-12)

    def gain(self, batch) -> np.ndarray:
        # Pollux parametrisation: grad_var at M0 = tr(Sigma)/M0, so phi_pollux = M0*var/sqr = phi
        return gain(batch, self.phi, self.ref_batch)

    def observe(self, nodes: int, replicas: int, local: float, step_s: float, sync_s: float,
                big_sq: float, small_sq: float, big_b: float, small_b: float) -> None:
        self.points.append((nodes, replicas, local, step_s, sync_s if replicas > 1 else 0.0))
        self.refit()
        if (m := gns_moments(big_sq, small_sq, big_b, small_b)) is not None:
            sqr, var = m
            if self.grad_sqr is None:
                self.grad_sqr, self.grad_var = sqr, var
            else:
                self.grad_sqr = EMA * self.grad_sqr + (1 - EMA) * sqr
                self.grad_var = EMA * self.grad_var + (1 - EMA) * var

    def refit(self, force: bool = False) -> None:
        """Fit on the mean of each distinct configuration, when a configuration is new or the
        number of points doubles: a fit costs seconds of CPU here, and the controller must not stall
        every chunk for it. One configuration: the prior, with its compute terms scaled to it."""
        groups: dict[tuple, list] = {}
        for p in self.points:
            groups.setdefault(p[:3], []).append(p[3:])
        n = len(self.points)
        new_config = len(groups[self.points[-1][:3]]) == 1
        if not (force or new_config or n & (n - 1) == 0):
            return
        keys = list(groups)
        step = np.array([np.mean([g[0] for g in groups[k]]) for k in keys])
        sync = np.array([np.mean([g[1] for g in groups[k]]) for k in keys])
        cfg = np.array(keys, float)
        if len(keys) == 1:
            pred = float(predict(PRIOR_PARAMS, *cfg[0])[0])
            k = float(step[0]) / pred
            self.params = replace(PRIOR_PARAMS, alpha_c=PRIOR_PARAMS.alpha_c * k, beta_c=PRIOR_PARAMS.beta_c * k)
            return
        args = (cfg[:, 0], cfg[:, 1], cfg[:, 2], step, sync)
        if self.fitter is None:
            self.params = fit_pollux(*args)
        elif self._pending is None:  # one fit in flight per job; the next trigger picks up new points
            self._pending = self.fitter.submit(fit_pollux, *args)

    def collect(self, wait: bool = False) -> None:
        """Take the result of the fit in flight, if done (or wait for it)."""
        if self._pending is not None and (wait or self._pending.done()):
            try:
                self.params = self._pending.result(timeout=120.0)
            finally:
                self._pending = None

    def effective_phi(self, progress: float) -> float:
        """The constant noise scale under which the steps trained (at their batches) give the
        progress the run counted: the run's gain used the noise scale of its time, which grows
        during training, so the final value alone would overstate early progress."""
        if not self.trained or progress <= 0:
            return self.phi
        b = np.array(list(self.trained), float)
        n = np.array(list(self.trained.values()), float)
        made = lambda phi: float(np.sum(n * gain(b, phi, self.ref_batch)))  # noqa: E731  (rises with phi)
        lo, hi = 1e-3, 1e9
        if not made(lo) <= progress <= made(hi):
            return self.phi
        for _ in range(100):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if made(mid) < progress else (lo, mid)
        return math.sqrt(lo * hi)

    def step_time(self, nodes, replicas, local) -> np.ndarray:
        return np.asarray(predict(self.params, nodes, replicas, local)[0], float)


class MeasuredPerf:
    """`PerfModel` over the runtime's measured job models (keyed by job name)."""

    segmented = False  # one constant rate per allocation (for the simulator's replay)

    def __init__(self, models: dict[str, OnlineFit], restart_s: float = 0.0, goodputs: dict | None = None) -> None:
        self.models = models
        self.goodputs = {} if goodputs is None else goodputs   # job name -> calibrated JobGoodput (or None)

    def calibrated(self, job, gpu_type: str):
        """The job's goodput object where policies read it (see the module docstring), else None."""
        good = self.goodputs.get(job.name)
        if good is None or not good.calibration.calibrated(gpu_type):
            return None
        fit = self.models[job.name]
        return good if len({p[:3] for p in fit.points}) < 2 else None

    def model(self, job) -> OnlineFit:
        jm = self.models[job.name]
        jm.collect()
        return jm

    def batch_range(self, job, gpu_type: str) -> tuple[int, int, int]:
        m0 = int(job.batch_size)
        lo, hi = job_batch_range(job, m0, 4 * m0)
        return lo, hi, _limit(job)

    def fitted(self, job, target: float):
        """The job's current online fit as the shared fitted model (`estimate.job_model.JobModel`): its
        Pollux step-time parameters and measured noise scale, progress counted in steps at M0 (so the
        training amount is M0 x ``target`` samples at M0). Its goodput table is what policies read."""
        from gpuwise.estimate.job_model import JobModel as FittedModel, PolluxStepTime
        from gpuwise.estimate.stat_efficiency import NoiseModel

        jm = self.model(job)
        lo, hi, limit = self.batch_range(job, "")
        noise = NoiseModel(phi=jm.phi, ref_batch=jm.ref_batch, samples_at_ref=jm.ref_batch * max(target, 1e-9))
        return FittedModel(PolluxStepTime(jm.params, "runtime online fit"), noise, lo, hi, limit)

    def goodput_grid(self, js: JobState, gpu_type: str, max_gpus: int, gpus_per_node: int,
                     batches: tuple[int, ...], accumulate: bool = False) -> np.ndarray:
        g = np.arange(1, max_gpus + 1, dtype=float)[:, None]
        local = np.asarray(batches, float)[None, :] / g
        good = self.calibrated(js.job, gpu_type)
        if good is not None:   # the goodput object's calibrated table; local batches within the slot limit
            table = good.table(gpu_type, max_gpus, gpus_per_node, batches)
            return np.where((local >= MIN_LOCAL) & (accumulate | (local <= _limit(js.job))), table, 0.0)
        table = self.fitted(js.job, js.target).goodput_table(g, np.ceil(g / max(1, gpus_per_node)), batches,
                                                             accumulate=accumulate)
        return np.where(local >= MIN_LOCAL, table, 0.0)   # two half-batches per rank for the noise estimate

    # -- the simulator's ground-truth interface (replay) ---------------------------------------
    def rates(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int | None) -> np.ndarray:
        """Steps at M0 per second on this placement (accumulating where the batch does not fit)."""
        b = float(batch or job.batch_size)
        table = self.fitted(job, 1.0).goodput_table(np.array([[float(num_gpus)]]), np.array([[float(num_nodes)]]),
                                                    (b,), accumulate=True)
        return np.array([float(table[0, 0])])

    def target(self, job) -> float:
        return float(job.steps)

    def assumptions(self, apps) -> list[str]:
        return [f"speed: per-job online Pollux fit of measured step and sync times (prior before the first "
                f"chunk: {PRIOR_PARAMS}); efficiency: Pollux/AdaScale gain with the measured gradient noise "
                f"scale (EMA {EMA}); progress counted in steps at the job's requested batch",
                ("jobs with a goodput object (a job spec or a built-in model): policies read its table calibrated on "
                 "the measured step times (median measured/predicted per GPU type, estimate.calibration) while "
                 "the Pollux fit has one configuration"),
                *(f"{name}: {n}" for name, good in sorted(self.goodputs.items()) if good is not None
                  for n in good.calibration.notes()),
                "the fake GPU types are the same CPU cores: one speed model per job for every type; per-slot "
                f"batch limits {({n: m.max_local_batch for n, m in small_models().items()})} (max_local_batch) stand in "
                "for GPU memory"]

    def describe(self) -> str:
        return "policies see the runtime's measured models (online Pollux fit + measured noise scale)"
