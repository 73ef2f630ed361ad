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

import math
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
    """Analytical step time of a job spec on one GPU type (data parallel; tp = pp = 1)."""
    from gpuwise.estimate.job_model import JobModel
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.estimate.step_time import AnalyticalStepTime
    from gpuwise.estimate.stat_efficiency import NoiseModel
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.jobspec import load_job
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    spec = load_job(path)
    gpu = get_gpu(gpu_name)
    model = spec.model_spec()
    tr = spec.training
    token = model.sample_unit == "token"
    samples = tr.amount_samples(token)
    if not samples:
        raise InputError(f"{field}.job", path, "the job spec needs a training amount (tokens, samples, epochs, steps)")
    lo, hi = tr.batch_range
    noise = NoiseModel(phi=tr.noise_scale or math.inf, ref_batch=tr.amount_reference_batch(),
                       samples_at_ref=samples, rule=tr.lr_scaling)
    zero = spec.parallelism.zero[0] if spec.parallelism.zero else 0
    cfg = TrainingConfig(micro_batch=1, seq_len=tr.seq_len if token else 1, grad_accum=1, precision=tr.precision,
                         optimizer=tr.optimizer, recompute=tr.recompute, lora_rank=tr.lora_rank,
                         quantize=tr.quantize, plan=ParallelPlan(dp=1, tp=1, pp=1, zero=zero))
    # largest per-GPU micro-batch that fits in memory (powers of two)
    local = 0
    b = 1
    while b <= 4096 and estimate_memory(model, TrainingConfig(**{**cfg.__dict__, "micro_batch": b}), gpu).fits(gpu):
        local, b = b, b * 2
    if local == 0:
        raise InputError(f"{field}.gpu", gpu_name, f"{model.name} does not fit on one {gpu.name} with tp = pp = 1; "
                                                   "pick a larger GPU or give a speedup table")
    jm = JobModel(AnalyticalStepTime(model, cfg, gpu, gpus_per_node), noise, lo, hi, local,
                  gpus_per_node=gpus_per_node, name=spec.name)
    return _from_model(jm, max_gpus or spec.constraints.max_gpus or DEFAULT_MAX, field,
                       f"job spec {spec.name} on {gpu.name} via the shared JobModel (analytical step time, "
                       f"data parallel, micro-batch <= {local})")
