"""The planner's view of a job: what it must train and what it may rent (built from a JobSpec)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwise.errors import InputError
from gpuwise.estimate.stat_efficiency import NoiseModel
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)   # per-GPU micro-batch candidates (powers of 2)


@dataclass(frozen=True)
class PlanJob:
    """Everything candidate generation needs, already validated."""

    name: str
    model: ModelSpec
    base: TrainingConfig              # precision, optimizer, recompute, seq_len, lora... (plan unset)
    noise: NoiseModel                 # steps to target as a function of global batch
    batches: tuple[int, ...]          # global batches to consider (samples per optimizer step)
    batch_range: tuple[int, int]      # allowed [min, max] global batch
    micro_batches: tuple[int, ...]    # per-GPU micro-batches to consider
    tp: tuple[int, ...]
    pp: tuple[int, ...]
    zero: tuple[int, ...]
    clouds: list[str]
    regions: list[str]
    gpus: list[str]
    max_gpus: int | None
    spot: bool
    deadline_hours: float | None
    budget_usd: float | None
    max_usd_per_hour: float | None
    checkpoint_gb: float | None       # None: weights + optimizer states (from the memory estimate)
    checkpoint_write_gbps: float
    checkpoint_interval_h: float | None
    restart_h: float
    tokens_per_sample: int            # seq_len for token models, 1 otherwise
    assumptions: list[str] = field(default_factory=list)
    inter_node_gbps: float | None = None   # node network (GB/s); None: the step-time model's default by GPU class


def batch_grid(lo: int, hi: int) -> tuple[int, ...]:
    """Global batches in [lo, hi]: the ends and the powers of two between them."""
    vals = {lo, hi}
    p = 1
    while p <= hi:
        if lo < p < hi:
            vals.add(p)
        p *= 2
    return tuple(sorted(vals))


def from_jobspec(spec, *, clouds: list[str] | None = None, gpus: list[str] | None = None,
                 spot: bool | None = None, max_gpus: int | None = None, require_amount: bool = True,
                 inter_node_gbps: float | None = None) -> PlanJob:
    """Build the planner's job from a validated JobSpec; CLI flags override the spec's constraints.
    ``require_amount=False`` (`gpuwise estimate`): a spec without a training amount ranks plans by
    time per sample (steps = 1 sample / global batch), and says so."""
    from gpuwise.estimate.job_model import noise_model_for

    model = spec.model_spec()
    tr = spec.training
    token_model = model.sample_unit == "token"
    # the same steps-to-target model the shared JobModel (simulator, rent solver) uses
    if require_amount or tr.amount_samples(token_model):
        noise = noise_model_for(spec)
    else:
        noise = NoiseModel(phi=math.inf, ref_batch=1, samples_at_ref=1.0)
    samples, phi = noise.samples_at_ref, noise.phi
    lo, hi = tr.batch_range
    base = TrainingConfig(micro_batch=1, seq_len=tr.seq_len if token_model else 1, grad_accum=1,
                          **tr.config_fields())
    micro = (tr.micro_batch,) if tr.micro_batch else MICRO_BATCHES
    if max_gpus is not None and max_gpus < 1:
        raise InputError("--max-gpus", max_gpus, "give at least 1")
    c = spec.constraints
    ck = spec.checkpoint
    amount = (f"{tr.tokens:.3g} tokens = {samples:.4g} sequences of {tr.seq_len}" if token_model and tr.tokens
              else f"{samples:.4g} samples")
    assumptions = [
        f"training amount: {amount}; global batch {lo}" + (f"-{hi}" if hi != lo else ""),
        noise.describe() if math.isfinite(phi) else
        (f"statistical efficiency: {tr.lr_scaling} LR scaling, no gradient noise scale given: "
         "steps = samples / global batch (perfect batch scaling)" if tr.lr_scaling == "adascale" else
         f"statistical efficiency: {tr.lr_scaling} LR scaling, no gradient noise scale given"),
    ]
    if not (require_amount or tr.amount_samples(token_model)):
        assumptions = ["no training amount in the spec: plans ranked by time per sample"]
    return PlanJob(
        name=spec.name, model=model, base=base, noise=noise, batches=batch_grid(lo, hi),
        batch_range=(lo, hi), micro_batches=micro, tp=tuple(spec.parallelism.tp),
        pp=tuple(spec.parallelism.pp), zero=tuple(spec.parallelism.zero),
        clouds=list(clouds) if clouds else list(c.clouds), regions=list(c.regions),
        gpus=list(gpus) if gpus else list(c.gpus),
        max_gpus=max_gpus if max_gpus is not None else c.max_gpus,
        spot=c.spot if spot is None else spot, deadline_hours=spec.deadline_hours,
        budget_usd=spec.budget_usd, max_usd_per_hour=c.max_usd_per_hour,
        checkpoint_gb=ck.size_gb, checkpoint_write_gbps=ck.write_gbps,
        checkpoint_interval_h=(ck.interval_minutes / 60.0) if ck.interval_minutes else None,
        restart_h=ck.restart_minutes / 60.0, tokens_per_sample=tr.seq_len if token_model else 1,
        assumptions=assumptions, inter_node_gbps=inter_node_gbps)
