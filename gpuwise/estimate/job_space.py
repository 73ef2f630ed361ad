"""What one job trains and what it may vary: the search space of its goodput object.

A ``JobSpace`` is built once from a job spec (``space_from_jobspec``). The goodput object
(`gpuwise.estimate.goodput.JobGoodput`) searches it on every hardware shape. Every caller shares the
same space: the planner, `estimate`, the policies, the simulator, the service and the rent solver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuwise.errors import InputError
from gpuwise.estimate.stat_efficiency import NoiseModel
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.models import for_seq_len
from gpuwise.workload.training import TrainingConfig

# Per-GPU micro-batches tried when the spec fixes none. Powers of two, as the frameworks' defaults are.
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# A fixed global batch that no layout of a shape can hold exactly may be rounded by at most this
# fraction. The rounding is then shown on the chosen row and in the assumptions, never silently.
FIXED_BATCH_ROUNDING = 0.25


@dataclass(frozen=True)
class JobSpace:
    """Everything the layout and batch search needs, already validated."""

    name: str
    model: ModelSpec
    base: TrainingConfig              # precision, optimizer, recompute, seq_len, lora... (plan unset)
    noise: NoiseModel                 # steps to target as a function of global batch
    batches: tuple[int, ...]          # global batches to consider (samples per optimizer step)
    batch_range: tuple[int, int]      # allowed [min, max] global batch
    micro_batches: tuple[int, ...]    # per-GPU micro-batches to consider
    tp: tuple[int, ...]               # allowed tensor-parallel degrees
    pp: tuple[int, ...]               # allowed pipeline-parallel degrees
    zero: tuple[int, ...]             # allowed ZeRO stages
    checkpoint_gb: float | None       # None: weights + optimizer states (from the memory model's accounting)
    checkpoint_write_gbps: float      # GB/s per node when writing or reading a checkpoint
    restart_s: float                  # fixed cost of a (re)start: new nodes, image, process group
    tokens_per_sample: int            # seq_len for token models, 1 otherwise
    inter_node_gbps: float | None = None   # node network (GB/s); None: the step-time model's default
    assumptions: tuple[str, ...] = field(default_factory=tuple)
    cp: tuple[int, ...] = (1,)        # allowed context-parallel degrees (job spec parallelism.cp; default 1)
    zero_shard: tuple[int, ...] = (0,)  # allowed hybrid ZeRO-1 groups (parallelism.zero_shard; 0 = all dp x cp ranks)

    @property
    def fixed_batch(self) -> bool:
        return self.batch_range[0] == self.batch_range[1]


def batch_grid(lo: int, hi: int) -> tuple[int, ...]:
    """THE global-batch grid of gpuwise: the ends of [lo, hi] and the powers of two between them.
    The planner, `estimate` and the policies all choose among these."""
    vals = {int(lo), int(hi)}
    p = 1
    while p <= hi:
        if lo < p < hi:
            vals.add(p)
        p *= 2
    return tuple(sorted(vals))


def micro_batch_grid(limit: int) -> tuple[int, ...]:
    """Per-GPU micro-batches tried up to ``limit``: the powers of two below it and the limit itself
    (the fitted JobModel's batch search; the layout search uses MICRO_BATCHES or the spec's own)."""
    vals = {int(limit)}
    p = 1
    while p < limit:
        vals.add(p)
        p *= 2
    return tuple(sorted(vals))


def noise_model_for(spec, field_name: str = "training") -> NoiseModel:
    """Steps to target of a JobSpec: its amount at its reference batch, its noise scale (inf = perfect
    scaling when not given) and its learning-rate scaling rule."""
    tr = spec.training
    samples = tr.amount_samples(spec.model_spec().sample_unit == "token")
    if not samples or samples <= 0:
        raise InputError(field_name, None, "the job spec needs a training amount (tokens, samples, epochs or steps)")
    return NoiseModel(phi=tr.noise_scale or math.inf, ref_batch=tr.amount_reference_batch(),
                      samples_at_ref=samples, rule=tr.lr_scaling)


def _amount_lines(spec, noise: NoiseModel, has_amount: bool) -> tuple[str, ...]:
    tr = spec.training
    token_model = spec.model_spec().sample_unit == "token"
    if not has_amount:
        return ("no training amount in the spec: plans ranked by time per sample",)
    lo, hi = tr.batch_range
    samples = noise.samples_at_ref
    amount = (f"{tr.tokens:.3g} tokens = {samples:.4g} sequences of {tr.seq_len}" if token_model and tr.tokens
              else f"{samples:.4g} samples")
    batch = f"global batch {lo}" + (f"-{hi}" if hi != lo else " (fixed)")
    eff = (noise.describe() if math.isfinite(noise.phi) else
           f"statistical efficiency: {tr.lr_scaling} LR scaling, no gradient noise scale given" +
           (": steps = samples / global batch (perfect batch scaling)" if tr.lr_scaling == "adascale" else ""))
    return (f"training amount: {amount}; {batch}", eff)


def space_from_jobspec(spec, *, require_amount: bool = True, inter_node_gbps: float | None = None) -> JobSpace:
    """The search space of a validated JobSpec. ``require_amount=False`` (`gpuwise estimate`): a spec
    without a training amount ranks configurations by time per sample (steps = 1 sample / global batch)."""
    tr = spec.training
    model = for_seq_len(spec.model_spec(), tr.seq_len)
    if not model.is_transformer and 1 not in spec.parallelism.cp:
        raise InputError("parallelism.cp", spec.parallelism.cp, f"{model.name} has no sequence to split over GPUs "
                         "(context parallelism is for transformers); allow cp: [1]")
    if not model.is_transformer and 0 not in spec.parallelism.zero_shard:
        raise InputError("parallelism.zero_shard", spec.parallelism.zero_shard, f"hybrid ZeRO-1 is modelled for "
                         f"transformers; {model.name} allows zero_shard: [0] only")
    token_model = model.sample_unit == "token"
    has_amount = bool(tr.amount_samples(token_model))
    if require_amount or has_amount:
        noise = noise_model_for(spec)
    else:
        noise = NoiseModel(phi=math.inf, ref_batch=1, samples_at_ref=1.0)
    lo, hi = tr.batch_range
    base = TrainingConfig(micro_batch=1, seq_len=tr.seq_len if token_model else 1, grad_accum=1,
                          **tr.config_fields())
    ck = spec.checkpoint
    return JobSpace(
        name=spec.name, model=model, base=base, noise=noise, batches=batch_grid(lo, hi), batch_range=(lo, hi),
        micro_batches=(tr.micro_batch,) if tr.micro_batch else MICRO_BATCHES,
        tp=tuple(spec.parallelism.tp), pp=tuple(spec.parallelism.pp), cp=tuple(spec.parallelism.cp),
        zero=tuple(spec.parallelism.zero), zero_shard=tuple(spec.parallelism.zero_shard),
        checkpoint_gb=ck.size_gb, checkpoint_write_gbps=ck.write_gbps, restart_s=ck.restart_minutes * 60.0,
        tokens_per_sample=tr.seq_len if token_model else 1, inter_node_gbps=inter_node_gbps,
        assumptions=_amount_lines(spec, noise, require_amount or has_amount))


def space_for_config(model: ModelSpec, cfg: TrainingConfig) -> JobSpace:
    """The search space of one fixed training configuration (`gpuwise fit-gpus`, `estimate --model`): its
    micro-batch, sequence, precision and levers; every tp/pp/ZeRO degree (cp 1: see `layouts`); any global
    batch; no training amount (configurations ranked by time per sample)."""
    from dataclasses import replace

    from gpuwise.estimate.layouts import ZERO_STAGES, pipeline_limit
    from gpuwise.workload.training import ParallelPlan

    hi = 1 << 20
    model = for_seq_len(model, cfg.seq_len)
    return JobSpace(
        name=model.name, model=model, base=replace(cfg, plan=ParallelPlan(), recompute="none"),
        noise=NoiseModel(phi=math.inf, ref_batch=1, samples_at_ref=1.0), batches=batch_grid(1, hi),
        batch_range=(1, hi), micro_batches=(cfg.micro_batch,), tp=tuple(range(1, 65)),
        pp=tuple(range(1, pipeline_limit(model) + 1)), zero=ZERO_STAGES, checkpoint_gb=None,
        checkpoint_write_gbps=1.0, restart_s=0.0, tokens_per_sample=cfg.seq_len if model.sample_unit == "token" else 1,
        assumptions=((f"one configuration: micro-batch {cfg.micro_batch} x {cfg.seq_len}; every tp/pp/ZeRO layout; "
                      "no training amount: ranked by time per sample"),))
