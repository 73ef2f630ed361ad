"""Frenzy's prediction for one submitted job on a shared cluster: memory -> GPU types and counts -> plan.

Frenzy (Chang et al., arXiv:2412.14479) lets users "submit models without worrying about underlying
hardware": the system predicts the per-GPU memory the job needs, derives the GPU types and counts
that can hold it and schedules it. This module is the library half of that promise, called by
`gpuwise submit`'s server and by anything else that takes a job spec:

- `spec_from_preset`: a model preset + training amount + constraints -> the same `JobSpec` a job
  YAML gives (so errors read the same);
- `predict_on_cluster`: per GPU type of the cluster, the fewest GPUs the job fits on (data parallel,
  gradient accumulation allowed, as the scheduler runs it), the per-GPU memory there, the count the
  Frenzy policy's efficiency floor keeps, the predicted time to target (the shared JobModel) and its
  dollar value at the cheapest on-demand catalog price of that GPU. The chosen option is the
  fastest (``objective="time"``) or the cheapest (``"cost"``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.workload.jobspec import JobSpec, parse_job

AMOUNT_KEYS = ("tokens", "samples", "epochs", "steps")
MIN_EFFICIENCY = 0.8   # per-GPU goodput kept vs the type's best (the Frenzy policy's default floor)
OBJECTIVES = ("time", "cost")


@dataclass(frozen=True)
class GpuOption:
    """One GPU type of the cluster for this job."""

    gpu: str
    capacity: int                      # GPUs of this type the job may use (cluster, constraints)
    min_gpus: int | None               # fewest GPUs it fits on (None: does not fit)
    gpus: int | None                   # count the efficiency floor keeps (the predicted allocation)
    global_batch: int | None
    micro_batch: int | None            # per-GPU micro-batch at that count
    grad_accum: int | None             # micro-steps per optimizer step
    memory_gib_per_gpu: float | None   # predicted peak per GPU at that count
    gpu_memory_gib: float
    time_hours: float | None           # predicted training time at that count
    usd_per_gpu_hour: float | None     # cheapest on-demand catalog price (None: no catalog row)
    cost_usd: float | None
    reason: str = ""                   # why it does not fit


@dataclass(frozen=True)
class Prediction:
    """Frenzy's answer for one job: options per GPU type, the chosen one, the assumptions."""

    job: str
    model: str
    params: int
    objective: str
    options: tuple[GpuOption, ...]
    chosen: GpuOption | None
    assumptions: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> list[GpuOption]:
        return [o for o in self.options if o.gpus is not None]

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "model": self.model, "params": self.params, "objective": self.objective,
                "options": [asdict(o) for o in self.options],
                "feasible": [{"gpu": o.gpu, "min_gpus": o.min_gpus, "max_gpus": o.capacity}
                             for o in self.feasible],
                "chosen": asdict(self.chosen) if self.chosen else None,
                "assumptions": list(self.assumptions)}


def spec_from_preset(model: str, amount: dict[str, float], global_batch: int | list[int], *,
                     name: str | None = None, seq_len: int | None = None,
                     constraints: dict | None = None, **training: Any) -> JobSpec:
    """A JobSpec from a preset (or config.json path) + one training amount + constraints. Bad values
    raise the same InputError, naming the same job-spec field, as the YAML form."""
    if not isinstance(amount, dict) or len([k for k in amount if k in AMOUNT_KEYS]) != 1:
        raise InputError("amount", amount, "give exactly one of " + ", ".join(AMOUNT_KEYS)
                         + ' e.g. {"samples": 3000000}')
    tr: dict[str, Any] = {**training, **amount, "global_batch": global_batch}
    if seq_len is not None:
        tr["seq_len"] = seq_len
    data: dict[str, Any] = {"name": name or str(model), "model": model, "training": tr}
    if constraints:
        data["constraints"] = constraints
    return parse_job(data)


def _cheapest_gpu_hour(gpu: str, catalog) -> float | None:
    prices = [o.price_usd_per_hour / o.gpus_per_node for o in catalog.filter(gpu=gpu)
              if o.price_usd_per_hour and o.gpus_per_node >= 1]
    return min(prices) if prices else None


def _option(spec: JobSpec, gpu: str, cluster: ClusterSpec, cap: int, price: float | None) -> GpuOption:
    from gpuwise.estimate.job_model import JobModel
    from gpuwise.estimate.performance import memory_of
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    g = get_gpu(gpu)
    gpn = cluster.max_gpus_per_node(gpu)
    none = dict(gpus=None, global_batch=None, micro_batch=None, grad_accum=None, memory_gib_per_gpu=None,
                time_hours=None, usd_per_gpu_hour=price, cost_usd=None)
    try:
        jm = JobModel.from_jobspec(spec, g, gpus_per_node=gpn, inter_node_gbps=cluster.inter_node_gbps)
    except InputError as exc:
        if not exc.field.endswith(".gpu"):
            raise
        return GpuOption(gpu, cap, None, gpu_memory_gib=g.memory_gib, reason=exc.fix, **none)
    first = next((n for n in range(1, cap + 1) if jm.best_batch(n) is not None), None)
    if first is None:
        return GpuOption(gpu, cap, None, gpu_memory_gib=g.memory_gib,
                         reason=f"no batch in [{jm.min_batch}, {jm.max_batch}] fits on <= {cap} GPUs", **none)
    shapes = sorted({1 << k for k in range(cap.bit_length()) if first <= 1 << k <= cap
                     and jm.best_batch(1 << k) is not None} | {first})
    per_gpu = {n: jm.best_batch(n).goodput / n for n in shapes}
    best = max(per_gpu.values())
    keep = [n for n in shapes if per_gpu[n] >= MIN_EFFICIENCY * best]
    n = max(keep, key=lambda k: jm.best_batch(k).goodput)
    ch = jm.best_batch(n)
    tr = spec.training
    model = spec.model_spec()
    cfg = TrainingConfig(micro_batch=ch.local_bsz, seq_len=tr.seq_len if model.sample_unit == "token" else 1,
                         grad_accum=ch.grad_accum, precision=tr.precision, optimizer=tr.optimizer,
                         recompute=tr.recompute, lora_rank=tr.lora_rank, quantize=tr.quantize,
                         plan=ParallelPlan(dp=ch.replicas, tp=1, pp=1, zero=spec.parallelism.zero[0]))
    mem = memory_of(model, cfg).per_gpu_gib
    hours = jm.time_to_target(n, choice=ch) / 3600.0
    cost = None if price is None or not math.isfinite(hours) else round(hours * n * price, 2)
    return GpuOption(gpu, cap, first, n, ch.global_batch, ch.local_bsz, ch.grad_accum, round(mem, 3),
                     g.memory_gib, round(hours, 4), price and round(price, 4), cost)


def predict_on_cluster(spec: JobSpec, cluster: ClusterSpec, objective: str = "time",
                       catalog=None) -> Prediction:
    """Frenzy's prediction for ``spec`` on ``cluster`` (see the module docstring)."""
    from gpuwise.hardware.catalog import load_catalog
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.models import param_count

    if objective not in OBJECTIVES:
        raise InputError("objective", objective, "use " + " or ".join(OBJECTIVES))
    catalog = catalog or load_catalog()
    allowed = {get_gpu(n, "constraints.gpus").name for n in spec.constraints.gpus}
    types = [t for t in cluster.gpu_types if not allowed or t in allowed]
    if not types:
        raise InputError("constraints.gpus", spec.constraints.gpus,
                         f"this cluster has {', '.join(cluster.gpu_types)}; allow one of them")
    limit = spec.constraints.max_gpus or (1 << 30)
    options = [_option(spec, t, cluster, min(cluster.gpus_of_type(t), limit), _cheapest_gpu_hour(t, catalog))
               for t in types]
    fits = [o for o in options if o.gpus is not None and o.time_hours is not None]
    if objective == "cost":
        key = lambda o: (o.cost_usd if o.cost_usd is not None else math.inf, o.time_hours)  # noqa: E731
    else:
        key = lambda o: (o.time_hours, o.cost_usd if o.cost_usd is not None else math.inf)  # noqa: E731
    chosen = min(fits, key=key) if fits else None
    model = spec.model_spec()
    assumptions = [
        "memory: gpuwise.estimate.memory at the chosen micro-batch, data parallel (tp = pp = 1, "
        f"ZeRO {spec.parallelism.zero[0]}); gradient accumulation when the batch does not fit",
        "time: the shared JobModel (analytical step time, the spec's noise scale and training amount); "
        f"no queueing, restarts or preemptions; GPU count = the fastest power of two keeping >= "
        f"{MIN_EFFICIENCY:.0%} of the best per-GPU goodput (the Frenzy policy's floor)",
        "cost: predicted GPU-hours x the cheapest on-demand catalog price per GPU-hour of the type "
        f"(catalog dates {', '.join(f'{k} {v}' for k, v in sorted(catalog.dates.items()))})",
        f"chosen: the {'cheapest' if objective == 'cost' else 'fastest'} GPU type of cluster {cluster.name}",
    ]
    return Prediction(spec.name, model.name, int(param_count(model)), objective, tuple(options), chosen,
                      assumptions)
