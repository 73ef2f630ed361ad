"""Speedup curves derived from the shared performance model (gpuwise.estimate.job_model).

The rent solver needs s(k) for k GPUs relative to one; the JobModel gives the best goodput
(throughput x statistical efficiency, with the batch re-chosen per width as Pollux does) on k
GPUs. Evaluated on a grid of widths, the ratios form a measured-style table that is replaced by
its concave hull like any other table. Two sources:
- `{pollux: APP}`: the Pollux step-time model fitted on the bundled profile of APP;
- `{job: FILE, gpu: NAME}`: a gpuwise job spec on a GPU type, through the analytical step time.
The single-GPU time to target is also returned: the job's size in single-GPU hours.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import InputError
from gpuwise.plan.rent.speedup import PiecewiseLinearSpeedup

DEFAULT_MAX = 64


@dataclass(frozen=True)
class DerivedSpeedup:
    speedup: PiecewiseLinearSpeedup
    single_gpu_hours: float      # time to target on one GPU (the job's size), hours
    table: dict[int, float]      # evaluated points before the hull
    source: str                  # for the assumptions


def _grid(max_gpus: float) -> list[int]:
    top = int(max_gpus)
    pts = {1, top}
    k = 1
    while k < top:
        pts.update({k, min(top, k + k // 2)})
        k *= 2
    return sorted(p for p in pts if 1 <= p <= top)


def _from_model(jm, max_gpus: float, field: str, source: str) -> DerivedSpeedup:
    table: dict[int, float] = {}
    for g in _grid(max_gpus):
        s = jm.speedup(g)
        if s > 0:
            table[g] = min(float(s), float(g))  # a superlinear blip would break the model
    if 1 not in table:
        raise InputError(field, source, "the job cannot run on one GPU under its batch limits; "
                                        "give a measured speedup table instead")
    hours = jm.time_to_target(1) / 3600.0
    sp = PiecewiseLinearSpeedup.from_table(table, field)
    return DerivedSpeedup(sp, hours, table, source)


def from_pollux(app: str, max_gpus: float | None, field: str) -> DerivedSpeedup:
    from gpuwise.estimate.job_model import JobModel
    from gpuwise.workload.pollux_traces import APPLICATIONS

    if app not in APPLICATIONS:
        from gpuwise.errors import unknown_name
        raise unknown_name(field, app, APPLICATIONS)
    jm = JobModel.for_pollux_app(app)
    return _from_model(jm, max_gpus or DEFAULT_MAX, field,
                       f"Pollux {app} profile via the shared JobModel (goodput speedup, batch re-chosen per width)")


def from_job(path: str, gpu_name: str, max_gpus: float | None, field: str, gpus_per_node: int = 8) -> DerivedSpeedup:
    """Analytical step time of a job spec on one GPU type (data parallel; tp = pp = 1), through
    ``JobModel.from_jobspec`` (the same construction the planner uses)."""
    from gpuwise.estimate.job_model import JobModel
    from gpuwise.workload.jobspec import load_job

    spec = load_job(path)
    jm = JobModel.from_jobspec(spec, gpu_name, gpus_per_node=gpus_per_node, field=field)
    gpu = jm.step_source.gpu
    return _from_model(jm, max_gpus or spec.constraints.max_gpus or DEFAULT_MAX, field,
                       f"job spec {spec.name} on {gpu.name} via the shared JobModel (analytical step time, "
                       f"data parallel, micro-batch <= {jm.max_local_bsz})")
