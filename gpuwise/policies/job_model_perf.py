"""`PerfModel` over the shared performance model (`gpuwise.estimate.job_model.JobModel`).

What a real deployment has: step time fitted on profile points (Pollux 7-parameter model) and a
constant-noise-scale statistical efficiency -- not the measured truth. `gpuwise simulate
--policy-model fitted` hands this to the policy while the simulator keeps advancing jobs with the
measured ground truth, so the cost of model error shows up in the metrics. The runtime will
pass the same object (fitted online) to the same policies.

T4-fitted step times are carried to other GPU types by `relative_speed` (whole step scaled, an
approximation) and the per-GPU batch limit by the memory ratio. Rigid jobs (no application) run
for their logged duration on exactly their requested GPUs.
"""

from __future__ import annotations

import numpy as np

from gpuwise.hardware.cluster import relative_speed

REFERENCE_GPU = "T4"  # the Pollux profiles the JobModel is fitted on were measured on T4s


class JobModelPerf:
    """Policies' view of job speed through the shared JobModel (fitted per application, cached)."""

    def __init__(self, fit_points: str = "all") -> None:
        self.fit_points = fit_points  # "all" profile rows or "online" (<= 10 points, as a new job has)
        self._models: dict[str, object] = {}

    def model(self, app: str):
        jm = self._models.get(app)
        if jm is None:
            from gpuwise.estimate.job_model import JobModel

            jm = JobModel.for_pollux_app(app, fit_points=self.fit_points)
            self._models[app] = jm
        return jm

    def batch_range(self, job, gpu_type: str) -> tuple[int, int, int]:
        if job.application is None:
            return (0, 0, 0)
        jm = self.model(job.application)
        lo, hi = job.min_batch or jm.min_batch, job.max_batch or jm.max_batch
        if job.batch_size:
            lo, hi = min(lo, job.batch_size), max(hi, job.batch_size)
        mem = relative_speed(gpu_type, REFERENCE_GPU)[1]
        return int(lo), int(hi), max(1, int(jm.max_local_bsz * mem))

    def goodput_grid(self, js, gpu_type: str, max_gpus: int, gpus_per_node: int,
                     batches: tuple[int, ...], accumulate: bool = False) -> np.ndarray:
        job = js.job
        out = np.zeros((max_gpus, len(batches)))
        if job.gpu_type not in (None, gpu_type):
            return out
        if job.application is None:
            if job.num_gpus <= max_gpus:
                out[job.num_gpus - 1, :] = 1.0 / job.duration_s
            return out
        jm = self.model(job.application)
        speed, _ = relative_speed(gpu_type, REFERENCE_GPU)
        limit = self.batch_range(job, gpu_type)[2]
        g = np.arange(1, max_gpus + 1, dtype=float)[:, None]
        b = np.asarray(batches, float)[None, :]
        nodes = np.ceil(g / gpus_per_node)
        local = b / g
        micro_steps = np.maximum(1.0, np.ceil(local / limit - 1e-9))  # > 1 only with accumulation
        step = np.asarray(jm.step_source.step_time(nodes, g, local / micro_steps, micro_steps - 1),
                          float) / speed
        good = b / step * np.asarray(jm.efficiency(b), float) / jm.noise.samples_at_ref
        return np.where((micro_steps <= 1) | accumulate, good, 0.0)

    def describe(self) -> str:
        return (f"policies see the shared JobModel fitted on {self.fit_points} Pollux profile points "
                "(step time) and a constant noise scale (efficiency); the simulator advances jobs with "
                "the measured profiles")

