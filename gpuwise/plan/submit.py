"""Frenzy's prediction for one submitted job on a shared cluster: memory -> GPU types and counts -> plan.

Frenzy (Chang et al., arXiv:2412.14479) lets users "submit models without worrying about underlying
hardware": the system predicts the per-GPU memory the job needs, derives the GPU types and counts
that can hold it and schedules it. This module is the library half of that promise, called by
`gpuwise submit`'s server and by anything else that takes a job spec:

- `spec_from_preset`: a model preset + training amount + constraints -> the same `JobSpec` a job
  YAML gives (so errors read the same);
- `predict_on_cluster`: per GPU type of the cluster, the fewest GPUs the job fits on (any layout the
  spec allows: FSDP/ZeRO, tensor and pipeline parallelism, recompute), the Frenzy policy's own plan
  there (`policies.frenzy.job_plans`: GPU count and batch it gives the job alone on the cluster), the
  layout, per-GPU memory and predicted time to target at that plan (all from the job's goodput
  object, `estimate.goodput.JobGoodput`, the same one `estimate`, `plan` and the simulator ask) and
  its dollar value at the cheapest on-demand catalog price of that GPU. The chosen option is the
  policy's fastest plan (``objective="time"``) or the cheapest (``"cost"``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.workload.jobspec import JobSpec, parse_job
from gpuwise.workload.models import for_seq_len

AMOUNT_KEYS = ("tokens", "samples", "epochs", "steps")
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
    layout: str | None                 # parallel layout at that count (dp/tp/pp, ZeRO stage, recompute)
    memory_gib_per_gpu: float | None   # memory that must fit per GPU at that count (allocated + CUDA context + NCCL)
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


def _frenzy_plans(spec: JobSpec, cluster: ClusterSpec, caps: dict[str, int]):
    """The Frenzy policy's own plans for this job alone on ``cluster`` (GPU types and counts limited
    by ``caps``), fastest first, with the PerfModel they were rated on -- the simulator's model of a
    job-spec job, so the prediction is what `gpuwise simulate --policy frenzy` and the service run."""
    from gpuwise.policies.base import JobState
    from gpuwise.policies.frenzy import job_plans
    from gpuwise.policies.job_model_perf import JobModelPerf
    from gpuwise.workload.traces import TraceJob

    key = "job"  # the name errors are prefixed with, as for any submitted spec
    gpn = {t: cluster.max_gpus_per_node(t) for t in caps}
    perf = JobModelPerf(inter_node_gbps=cluster.inter_node_gbps, specs={key: spec}, gpus_per_node=gpn,
                        capacity=caps)
    js = JobState(TraceJob(spec.name, 0.0, 1, jobspec=key), submitted_s=0.0, target=1.0)
    shapes = {t: (caps[t], gpn[t]) for t in caps if caps[t] >= 1}
    plans = job_plans(js, shapes, perf)
    fits = {t: caps[t] >= 1 and perf.spec_fits(key, t, gpn[t]) for t in caps}
    why = {t: perf.spec_errors.get((key, t, gpn[t]), "") for t in caps}
    return plans, perf.spec_model(key), gpn, fits, why


def _option(gpu: str, cap: int, gpn: int, good, fits: bool, why: str, plan, price: float | None) -> GpuOption:
    """The option on one GPU type: ``plan`` is Frenzy's fastest plan there (None: none), ``good`` the
    job's goodput object; ``fits`` False: no allowed layout fits the type, for the reason ``why``."""
    from gpuwise.hardware.gpus import get_gpu

    g = get_gpu(gpu)
    none = dict(gpus=None, global_batch=None, micro_batch=None, grad_accum=None, layout=None,
                memory_gib_per_gpu=None, time_hours=None, usd_per_gpu_hour=price, cost_usd=None)
    if not fits:
        return GpuOption(gpu, cap, None, gpu_memory_gib=g.memory_gib, reason=why, **none)
    first = good.fewest_gpus(gpu, gpn, cap)
    if plan is None:
        why = ("no plan of the Frenzy policy (1, 2, 4 GPUs in a node or whole nodes, <= "
               f"{cap}) holds a batch in the job's range")
        return GpuOption(gpu, cap, first, gpu_memory_gib=g.memory_gib, reason=why, **none)
    opt = good.at_batch(gpu, gpn, plan.gpus, plan.batch)
    c = opt.config
    layout = f"{c.plan.label()}, recompute {c.recompute}"
    hours = opt.train_hours
    n = opt.gpus
    cost = None if price is None or not math.isfinite(hours) else round(hours * n * price, 2)
    return GpuOption(gpu, cap, first, n, opt.global_batch, opt.micro_batch, opt.grad_accum, layout,
                     round(opt.memory_required_gib, 3), g.memory_gib, round(hours, 4), price and round(price, 4), cost)


def predict_on_cluster(spec: JobSpec, cluster: ClusterSpec, objective: str = "time",
                       catalog=None) -> Prediction:
    """Frenzy's prediction for ``spec`` on ``cluster`` (see the module docstring)."""
    from gpuwise.hardware.catalog import load_catalog
    from gpuwise.hardware.gpus import user_gpu
    from gpuwise.workload.models import param_count

    if objective not in OBJECTIVES:
        raise InputError("objective", objective, "use " + " or ".join(OBJECTIVES))
    catalog = catalog or load_catalog()
    allowed = {user_gpu(n, "constraints.gpus").name for n in spec.constraints.gpus}
    types = [t for t in cluster.gpu_types if not allowed or t in allowed]
    if not types:
        raise InputError("constraints.gpus", spec.constraints.gpus,
                         f"this cluster has {', '.join(cluster.gpu_types)}; allow one of them")
    limit = spec.constraints.max_gpus or (1 << 30)
    caps = {t: min(cluster.gpus_of_type(t), limit) for t in types}
    plans, good, gpn, fits, why = _frenzy_plans(spec, cluster, caps)
    fastest = {}
    for p in plans:  # fastest first: the first plan of each type is the type's option
        fastest.setdefault(p.gpu, p)
    options = [_option(t, caps[t], gpn[t], good, fits[t], why[t], fastest.get(t), _cheapest_gpu_hour(t, catalog))
               for t in types]
    fits = [o for o in options if o.gpus is not None and o.time_hours is not None]
    if objective == "cost":
        key = lambda o: (o.cost_usd if o.cost_usd is not None else math.inf, o.time_hours)  # noqa: E731
        chosen = min(fits, key=key) if fits else None
    else:  # the Frenzy policy's own choice for the job alone: its fastest plan over all types
        chosen = next((o for o in fits if o.gpu == plans[0].gpu), None) if plans else None
    model = for_seq_len(spec.model_spec(), spec.training.seq_len)
    assumptions = [
        "layout, memory and time: the job's goodput object (gpuwise.estimate.goodput.JobGoodput, the search "
        "`gpuwise estimate` and `gpuwise plan` run): the fastest allowed layout (tp/pp/ZeRO, lightest "
        "recompute that fits, micro-batch and accumulation) for the plan's GPU count and global batch; "
        "no queueing, restarts or preemptions",
        "GPU count and batch per type = the Frenzy policy's fastest plan for the job alone on the cluster "
        "(1, 2, 4 GPUs in a node or whole nodes, model-best batch: gpuwise.policies.frenzy.job_plans)",
        *good.assumptions(),
        "cost: predicted GPU-hours x the cheapest on-demand catalog price per GPU-hour of the type "
        f"(catalog dates {', '.join(f'{k} {v}' for k, v in sorted(catalog.dates.items()))})",
        f"chosen: the {'cheapest' if objective == 'cost' else 'fastest'} GPU type of cluster {cluster.name}",
    ]
    return Prediction(spec.name, model.name, int(param_count(model)), objective, tuple(options), chosen,
                      assumptions)
