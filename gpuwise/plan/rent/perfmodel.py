"""Speedup curves derived from the shared performance models.

The rent solver needs s(k) for k GPUs relative to one; the job's model gives the best goodput
(throughput x statistical efficiency, with the batch re-chosen per width as Pollux does) on k
GPUs: the fitted JobModel of a Pollux profile, or the goodput object of a job spec (its layout
re-chosen per width too). Evaluated on a grid of widths, the ratios form a measured-style table that is replaced by
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


def _from_model(speedup, one_gpu_s, max_gpus: float, field: str, source: str) -> DerivedSpeedup:
    """``speedup(g)``: best goodput on g GPUs over the best on one; ``one_gpu_s()``: time to target on one GPU."""
    table: dict[int, float] = {}
    for g in _grid(max_gpus):
        s = speedup(g)
        if s > 0:
            table[g] = min(float(s), float(g))  # a superlinear blip would break the model
    if 1 not in table:
        raise InputError(field, source, "the job cannot run on one GPU under its batch limits; "
                                        "give a measured speedup table instead")
    hours = one_gpu_s() / 3600.0
    sp = PiecewiseLinearSpeedup.from_table(table, field)
    return DerivedSpeedup(sp, hours, table, source)


def from_pollux(app: str, max_gpus: float | None, field: str) -> DerivedSpeedup:
    from gpuwise.estimate.job_model import JobModel
    from gpuwise.workload.pollux_traces import APPLICATIONS

    if app not in APPLICATIONS:
        from gpuwise.errors import unknown_name
        raise unknown_name(field, app, APPLICATIONS)
    jm = JobModel.for_pollux_app(app)
    return _from_model(jm.speedup, lambda: jm.time_to_target(1), max_gpus or DEFAULT_MAX, field,
                       f"Pollux {app} profile via the shared JobModel (goodput speedup, batch re-chosen per width)")


def from_job(path: str, gpu_name: str, max_gpus: float | None, field: str, gpus_per_node: int = 8) -> DerivedSpeedup:
    """A job spec on one GPU type through its goodput object (the planner's layout and batch search on
    every width: the same answer `gpuwise estimate` gives on that shape)."""
    from gpuwise.estimate.goodput import JobGoodput
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.jobspec import load_job

    gpu = get_gpu(gpu_name, f"{field}.gpu")
    spec = load_job(path)
    good = JobGoodput.from_jobspec(spec)
    one = good.best(gpu.name, gpus_per_node, 1)
    if one is None:
        n = good.fewest_gpus(gpu.name, gpus_per_node, int(max_gpus or DEFAULT_MAX))
        raise InputError(f"{field}.gpu", gpu.name, f"{good.space.model.name} does not fit on one {gpu.name}"
                         + (f" (fewest: {n} GPUs)" if n else "") + "; the rent model needs a single-GPU job size: "
                         "pick a larger GPU or give a measured speedup table")
    return _from_model(lambda g: good.speedup(gpu.name, gpus_per_node, g), lambda: one.train_hours * 3600.0,
                       max_gpus or spec.constraints.max_gpus or DEFAULT_MAX, field,
                       f"job spec {good.name} on {gpu.name} via its goodput object (estimate.goodput: layout and "
                       "batch re-chosen per width)")
