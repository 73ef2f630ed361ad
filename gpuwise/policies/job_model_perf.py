"""`PerfModel` over the shared performance model (`gpuwise.estimate.job_model.JobModel`).

What a real deployment has: step time fitted on profile points (Pollux 7-parameter model) and a
constant-noise-scale statistical efficiency -- not the measured truth. `gpuwise simulate
--policy-model fitted` hands this to the policy while the simulator keeps advancing jobs with the
measured ground truth, so the cost of model error shows up in the metrics. The runtime will
pass the same object (fitted online) to the same policies.

T4-fitted step times are carried to other GPU types by `relative_speed` (whole step scaled, an
approximation) and the per-GPU batch limit by the memory ratio. Rigid jobs (no application) run
for their logged duration on exactly their requested GPUs.

Jobs described by a job-spec YAML (``TraceJob.jobspec``) have no measured profile: their model is
the job's goodput object (`gpuwise.estimate.goodput.JobGoodput`, the planner's own layout and batch
search: FSDP/ZeRO, tensor and pipeline parallelism, recompute), and it is both what policies see
and the simulator's ground truth.
"""

from __future__ import annotations

import numpy as np

from gpuwise.hardware.cluster import relative_speed
from gpuwise.policies.base import job_batch_range

REFERENCE_GPU = "T4"  # the Pollux profiles the JobModel is fitted on were measured on T4s
SPEC_MAX_GPUS = 64    # GPUs of a type a spec job is checked against when the caller gives no capacity


class JobModelPerf:
    """Policies' view of job speed through the shared JobModel (fitted per application, cached)."""

    def __init__(self, fit_points: str = "all", inter_node_gbps: float | None = None,
                 specs: dict | None = None, gpus_per_node: dict[str, int] | None = None,
                 capacity: dict[str, int] | None = None) -> None:
        self.fit_points = fit_points  # "all" profile rows or "online" (<= 10 points, as a new job has)
        self.inter_node_gbps = inter_node_gbps  # network of spec jobs' analytical model (None: its default)
        # job specs already parsed, by the name TraceJob.jobspec gives them (else it is a YAML path):
        # a submitted spec is predicted without writing it to a file first
        self.specs = dict(specs or {})
        self.gpus_per_node = dict(gpus_per_node or {})  # per GPU type, where batch_range is not told
        self._models: dict[str, object] = {}
        self.capacity = dict(capacity or {})             # GPUs of each type a spec job may get (fits check)
        self._spec_models: dict[str, object] = {}
        self._fits: dict[tuple, bool] = {}
        self.spec_errors: dict[tuple, str] = {}  # (spec, GPU type, GPUs per node) -> why it does not fit

    def model(self, app: str):
        jm = self._models.get(app)
        if jm is None:
            from gpuwise.estimate.job_model import JobModel

            jm = JobModel.for_pollux_app(app, fit_points=self.fit_points)
            self._models[app] = jm
        return jm

    def spec_model(self, path: str):
        """The goodput object of a job-spec YAML (one per spec; it answers for every GPU type)."""
        good = self._spec_models.get(path)
        if good is None:
            from gpuwise.estimate.goodput import JobGoodput

            good = JobGoodput.from_jobspec(self.specs.get(path, path), inter_node_gbps=self.inter_node_gbps)
            self._spec_models[path] = good
        return good

    def spec_fits(self, path: str, gpu_type: str, gpus_per_node: int) -> bool:
        """Whether some allowed layout of the spec fits on at most ``capacity[gpu_type]`` GPUs of the type
        (default SPEC_MAX_GPUS); why not is kept in ``spec_errors``."""
        key = (path, gpu_type, gpus_per_node)
        if key not in self._fits:
            cap = self.capacity.get(gpu_type, SPEC_MAX_GPUS)
            n = self.spec_model(path).fewest_gpus(gpu_type, gpus_per_node, cap)
            self._fits[key] = n is not None
            if n is None:
                self.spec_errors[key] = (f"{self.spec_model(path).space.model.name} does not fit: no layout the spec "
                                         f"allows (tp/pp/ZeRO, recompute) fits on up to {cap} x {gpu_type} with a "
                                         "global batch in its range")
        return self._fits[key]

    def batch_range(self, job, gpu_type: str, gpus_per_node: int | None = None) -> tuple[int, int, int]:
        if gpus_per_node is None:
            gpus_per_node = self.gpus_per_node.get(gpu_type, 8)
        if job.jobspec is not None:
            if not self.spec_fits(job.jobspec, gpu_type, gpus_per_node):
                return (0, 0, 0)
            lo, hi = self.spec_model(job.jobspec).space.batch_range
            # the third value only says the job fits the type: micro-batches belong to each layout
            return (*job_batch_range(job, lo, hi), 1)
        if job.application is None:
            return (0, 0, 0)
        jm = self.model(job.application)
        mem = relative_speed(gpu_type, REFERENCE_GPU)[1]
        return (*job_batch_range(job, jm.min_batch, jm.max_batch), max(1, int(jm.max_local_bsz * mem)))

    def goodput_grid(self, js, gpu_type: str, max_gpus: int, gpus_per_node: int,
                     batches: tuple[int, ...], accumulate: bool = False) -> np.ndarray:
        job = js.job
        out = np.zeros((max_gpus, len(batches)))
        if job.gpu_type not in (None, gpu_type):
            return out
        if job.jobspec is not None:
            if not self.spec_fits(job.jobspec, gpu_type, gpus_per_node):
                return out
            return self.spec_model(job.jobspec).table(gpu_type, max_gpus, gpus_per_node, batches)
        if job.application is None:
            if job.num_gpus <= max_gpus:
                out[job.num_gpus - 1, :] = 1.0 / job.duration_s
            return out
        jm = self.model(job.application)
        speed, _ = relative_speed(gpu_type, REFERENCE_GPU)
        limit = self.batch_range(job, gpu_type)[2]
        g = np.arange(1, max_gpus + 1, dtype=float)[:, None]
        return jm.goodput_table(g, np.ceil(g / gpus_per_node), batches, limit, speed, accumulate)

    def spec_rate(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int,
                  gpus_per_node: int) -> float:
        """Fraction of a job-spec job done per second on this placement at global batch ``batch``, at its
        best layout -- the simulator's ground truth for such jobs."""
        opt = self.spec_option(job, gpu_type, num_gpus, num_nodes, batch, gpus_per_node)
        return 0.0 if opt is None else opt.goodput

    def spec_layout(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int, gpus_per_node: int):
        """The layout the goodput object runs this placement with, as one line (None if nothing fits)."""
        opt = self.spec_option(job, gpu_type, num_gpus, num_nodes, batch, gpus_per_node)
        if opt is None:
            return None
        c = opt.config
        return f"{c.plan.label()}, recompute {c.recompute}, micro {c.micro_batch} x accum {c.grad_accum}"

    def spec_option(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int, gpus_per_node: int):
        """The goodput object's configuration (layout, micro-batch, step time...) for this placement."""
        # the placement's own node size: a job spread over more nodes than it needs pays for it
        per_node = min(gpus_per_node, -(-num_gpus // max(1, num_nodes)))
        return self.spec_model(job.jobspec).at_batch(gpu_type, per_node, num_gpus, int(batch), nodes=num_nodes)

    @classmethod
    def for_cluster(cls, cluster, **kw) -> "JobModelPerf":
        """The model as a simulator of ``cluster`` uses it: its network, node sizes and capacity per type."""
        gpn = {t: cluster.max_gpus_per_node(t) for t in cluster.gpu_types}
        cap = {} if cluster.unbounded else {t: cluster.gpus_of_type(t) for t in cluster.gpu_types}
        return cls(inter_node_gbps=cluster.inter_node_gbps, gpus_per_node=gpn, capacity=cap, **kw)

    def describe(self) -> str:
        return (f"policies see the shared JobModel fitted on {self.fit_points} Pollux profile points "
                "(step time) and a constant noise scale (efficiency); the simulator advances jobs with "
                "the measured profiles")

    def spec_assumptions(self) -> list[str]:
        """Assumptions of the job-spec goodput objects built so far (one line per spec, then per type)."""
        out = []
        for path, good in sorted(self._spec_models.items(), key=lambda kv: kv[0]):
            out.append(f"{path}: the job's goodput object (estimate.goodput.JobGoodput) -- " + "; ".join(good.assumptions()))
        for (path, gpu, gpn), ok in sorted(self._fits.items()):
            if not ok:
                out.append(f"{path}: does not fit on {gpu} ({self.spec_errors[(path, gpu, gpn)]}; the job runs on other types only)")
        return out
