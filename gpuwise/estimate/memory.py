"""Per-GPU peak memory of one training step: parameters, gradients, optimizer, activations, overhead.

The peak is taken over pipeline stages and over the moments of a step (memory_timeline.py): each
stage holds the embedding (stage 0) or the output layer (last stage), its share of the layers (the
remainder of layers / pp goes to the last stages, which hold fewer micro-batches) and the
micro-batches its schedule keeps in flight. Tensor parallelism splits matrices (norms and
row-parallel biases replicated); ZeRO shards optimizer state (1), gradients (2) and weights (3)
over the dp x cp ranks; context parallelism splits the sequence. What each framework stores per
parameter (PyTorch autocast / FSDP2, DeepSpeed ZeRO-1/2, Megatron-LM) is in model_states.py;
what tensors don't show (allocator, context, NCCL) in overhead.py. Sources: ZeRO paper (model
states), Korthikanti et al. 2022 (activations), QLoRA (NF4), PyTorch FSDP2 / torchtitan defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache, partial
from itertools import accumulate

from gpuwise.errors import InputError
from gpuwise.estimate import activations as act
from gpuwise.estimate.dora import dora_layer_bytes, dora_note, dora_reruns_frozen
from gpuwise.estimate.gptq import QUANTIZE_CHOICES, gptq_format, gptq_note
from gpuwise.estimate.layouts import pipeline_limit
from gpuwise.estimate.levers import (ACT_OFFLOAD_RESIDENT, blocked, check_levers, kernel_note, lever_notes,
                                     lora_dropout as dropout_p, offload_grads_held, resolve)
from gpuwise.estimate.lora import NF4_BYTES, adapter_params, attention_blocks, lora_modules, targets_text
from gpuwise.estimate.memory_timeline import FIELD_INDEX, StageLoad, in_flight, peak_values, stage_values
from gpuwise.estimate.model_states import StateSemantics, state_bytes, state_semantics
from gpuwise.estimate.overhead import (GIB, allocator_slack_bytes, context_bytes, describe as describe_overhead,
                                       nccl_bytes)
from gpuwise.estimate.stack_code import describe as describe_code, model_code
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.models import for_seq_len, load_model, param_count, param_counts, positions_note
from gpuwise.workload.stacks import stack_row
from gpuwise.workload.training import (OPTIMIZERS, PP_SCHEDULES, PRECISIONS, STACKS, TrainingConfig,
                                       recompute_policy)

PARTS = ("parameters", "gradients", "optimizer", "activations", "temporaries", "overhead")


class _Notes:
    """The `notes` field of MemoryEstimate: a tuple, or a function of no arguments that builds it on the first
    read (then kept). A search estimates thousands of configurations and shows the assumptions of a few, so
    `_estimate` defers its lines; reading `notes` (or `assumptions`, repr, ==, pickling) gives the same tuple
    either way. A data descriptor, so the frozen dataclass's generated __init__ and `replace` still set it."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return ()                       # the dataclass's default
        value = obj.__dict__[self.slot]
        if callable(value):
            value = obj.__dict__[self.slot] = tuple(value())
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = value


class _Kept:
    """A property computed on first read and kept in the instance's __dict__ (functools.cached_property
    without its lock, which Python 3.11 takes on every first read: ~6,000 estimates per plan). For frozen
    fields only: the value is never recomputed."""

    def __init__(self, fn) -> None:
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes on the most loaded GPU of a training configuration, split by what is alive at
    the peak (the parts of the peak phase; they sum to the allocated peak plus overhead)."""

    parameters: float            # stored weights (sharded under ZeRO-3 / FSDP)
    gradients: float             # gradients alive at the peak (incl. FSDP's unsharded accumulators under PP)
    optimizer: float             # optimizer states (incl. separate fp32 master weights where kept)
    activations: float           # saved for backward (+ a recomputed block's working set) at the peak stage
    overhead: float              # not in tensors: allocator slack + CUDA context + NCCL buffers
    params: int                  # model parameters (all)
    trainable_params: int        # parameters that get gradients (LoRA: adapters only)
    peak_stage: int = 0          # pipeline stage with the peak
    notes: tuple[str, ...] = _Notes()   # the assumptions (immutable: estimates are memoised; built on first read)
    temporaries: float = 0.0     # transient tensors at the peak: gathered/cast weight copies, loss and
    #                              gradient buffers, optimizer-step temporaries
    allocator: float = 0.0       # part of `overhead`: reserved - allocated (caching allocator)
    context: float = 0.0         # part of `overhead`: CUDA context and workspaces
    nccl: float = 0.0            # part of `overhead`: NCCL communicator buffers
    peak_phase: str = ""         # when the peak happens (loss boundary, block backward, optimizer step)

    @property
    def assumptions(self) -> list[str]:
        """What the estimate assumes (a fresh list each time)."""
        return list(self.notes)

    def __getstate__(self) -> dict:
        self.notes                          # pickle / copy the lines, not the function that builds them
        return self.__dict__

    @property
    def allocated(self) -> float:
        """Peak bytes of live tensors (torch.cuda.max_memory_allocated)."""
        return self.parameters + self.gradients + self.optimizer + self.activations + self.temporaries

    @property
    def reserved(self) -> float:
        """Peak bytes the caching allocator holds (torch.cuda.max_memory_reserved)."""
        return self.allocated + self.allocator

    @property
    def total(self) -> float:
        """Device memory the process needs (what nvidia-smi shows): reserved + context + NCCL."""
        return self.allocated + self.overhead

    @property
    def per_gpu_gib(self) -> float:
        return self.total / GIB

    def breakdown_gib(self) -> dict[str, float]:
        return {k: getattr(self, k) / GIB for k in PARTS}

    @_Kept     # the fields are frozen; a search asks ~26,000 times
    def required(self) -> float:
        """Bytes that must fit: the allocated peak, the CUDA context and NCCL buffers. Near capacity the
        caching allocator frees its cached blocks and retries before raising OOM, so its slack is
        covered by the fit headroom, not by `allocator` (the slack when memory is plentiful)."""
        return self.allocated + self.context + self.nccl

    def fits(self, gpu: GpuSpec) -> bool:
        """True if `required` fits in the GPU's device memory less the stated headroom."""
        return self.headroom_gib(gpu) >= 0

    def shortfall_text(self, gpu: GpuSpec) -> str:
        """'X GiB needed per GPU > Y GiB' for a plan that does not fit (the numbers `fits` compares)."""
        f = self.fit_gib(gpu)
        return (f"{f['required']:.1f} GiB needed per GPU (allocated + CUDA context + NCCL) > "
                f"{f['usable']:.1f} GiB ({gpu.name} device memory less {HEADROOM_FRACTION:.0%} headroom)")

    def fit_gib(self, gpu: GpuSpec) -> dict[str, float]:
        """Every number behind `fits(gpu)`, in GiB, so the verdict can be checked from what is printed:
        allocated (tensors, max_memory_allocated), reserved (+ allocator slack, max_memory_reserved),
        device_total (reserved + CUDA context + NCCL: what nvidia-smi shows), required (allocated +
        context + NCCL: what must fit), device (the GPU's memory), headroom (the fraction kept free),
        usable (device - headroom: `required` must not exceed it) and spare (usable - required)."""
        usable = gpu.total_gib - fit_headroom_gib(gpu)
        return {"allocated": self.allocated / GIB, "reserved": self.reserved / GIB, "device_total": self.per_gpu_gib,
                "required": self.required / GIB, "device": gpu.total_gib, "headroom": fit_headroom_gib(gpu),
                "usable": usable, "spare": usable - self.required / GIB}

    def fit_text(self, gpu: GpuSpec) -> str:
        """One line that explains `fits(gpu)` from the printed numbers."""
        f = self.fit_gib(gpu)
        verdict = "fits" if self.fits(gpu) else "DOES NOT FIT"
        return (f"{gpu.name}: {verdict}: required {f['required']:.1f} GiB (allocated {f['allocated']:.1f} + CUDA "
                f"context + NCCL) {'<=' if self.fits(gpu) else '>'} usable {f['usable']:.1f} GiB (device "
                f"{f['device']:.1f} less {HEADROOM_FRACTION:.0%} headroom {f['headroom']:.1f}), "
                f"{f['spare']:+.1f} GiB spare; the allocator's cache ({f['reserved'] - f['allocated']:.1f} GiB, "
                f"reserved {f['reserved']:.1f}) is given back under memory pressure, so it is not required")

    def headroom_gib(self, gpu: GpuSpec) -> float:
        """GiB left after `required` and the fit headroom (negative: does not fit)."""
        total = gpu.total_gib     # read once: searches ask ~10^4 times (fit_headroom_gib's product)
        return total - HEADROOM_FRACTION * total - self.required / GIB


# MemoryEstimate's fields in order as its __dict__ holds them (`notes` under its descriptor's slot)
_ESTIMATE_SLOTS = tuple("_notes" if f == "notes" else f for f in MemoryEstimate.__dataclass_fields__)

# Kept free when deciding `fits`: what the allocator cannot reuse under memory pressure. A public OOM
# report shows 1.83 GiB reserved-but-unallocated next to 75.31 GiB allocated (2.4%, 70B model on an
# 80 GB GPU, vllm-project/compressed-tensors PR #587); 5% leaves room for more fragmented workloads.
HEADROOM_FRACTION = 0.05


def fit_headroom_gib(gpu: GpuSpec) -> float:
    return HEADROOM_FRACTION * gpu.total_gib


# ------------------------------------------------------------------ input checks

def check_config(spec: ModelSpec, cfg: TrainingConfig) -> None:
    """Raise InputError (one line: field, value, fix) for settings that cannot be trained."""
    p = cfg.plan
    sizes = (cfg.micro_batch, cfg.seq_len, cfg.grad_accum, p.dp, p.tp, p.pp, p.cp)
    if {*map(type, sizes)} != {int} or min(sizes) <= 0:     # a search's configurations skip the loop
        for name, value in zip(("batch-size", "seq-len", "grad-accum", "dp", "tp", "pp", "cp"), sizes):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(name, value, "must be a positive integer")
    if cfg.precision not in PRECISIONS:
        raise InputError("precision", cfg.precision, "use one of " + ", ".join(PRECISIONS))
    if cfg.optimizer not in OPTIMIZERS:
        raise InputError("optimizer", cfg.optimizer, "use one of " + ", ".join(OPTIMIZERS))
    recompute_policy(cfg.recompute)          # InputError naming the policies
    if cfg.stack not in STACKS:
        raise InputError("stack", cfg.stack, "use one of " + ", ".join(STACKS))
    check_levers(cfg, spec.is_transformer)
    if cfg.dora and spec.n_experts > 1:
        raise InputError("dora", True, f"DoRA on a mixture of experts ({spec.name}: {spec.n_experts} experts) is not "
                         "modelled: drop --dora, or use LoRA")
    sched = p.pp_schedule
    if not (sched in ("1f1b", "gpipe", "zb", "zb-h1") or (sched.startswith("interleaved-") and sched[12:].isdigit()
                                                   and int(sched[12:]) >= 2)):
        raise InputError("pp-schedule", sched, "use one of " + ", ".join(PP_SCHEDULES) + " (V >= 2 chunks per stage, "
                         "e.g. interleaved-2)")
    if sched.startswith("interleaved-") and p.pp * int(sched[12:]) > pipeline_limit(spec):
        raise InputError("pp-schedule", sched, f"pp {p.pp} x {sched[12:]} chunks needs at least that many layers "
                         f"({pipeline_limit(spec)} here): use fewer chunks per stage")
    if p.zero not in (0, 1, 2, 3):
        raise InputError("zero", p.zero, "use a ZeRO stage 0, 1, 2 or 3")
    if p.zero_shard != 0 or type(p.zero_shard) is not int:     # 0: nothing to check (the common case)
        check_zero_shard(p)
    if cfg.lora_rank < 0:
        raise InputError("lora-rank", cfg.lora_rank, "use 0 (full fine-tuning) or a positive rank")
    if cfg.quantize not in (None, *QUANTIZE_CHOICES):
        raise InputError("quantize", cfg.quantize, "use one of " + ", ".join(QUANTIZE_CHOICES))
    if cfg.quantize and cfg.lora_rank <= 0:
        raise InputError("quantize", cfg.quantize, "a quantised base is frozen: add --lora-rank R (QLoRA)")
    if not spec.is_transformer:
        if p.tp > 1 or p.pp > 1 or p.cp > 1:
            raise InputError("tp/pp/cp", f"{p.tp}/{p.pp}/{p.cp}",
                             f"{spec.name} is described by explicit numbers; use data parallelism (tp=pp=cp=1)")
        if cfg.lora_rank or cfg.quantize:
            raise InputError("lora-rank", cfg.lora_rank, f"LoRA/4-bit need a transformer; {spec.name} is not one")
        if p.zero_shard:
            raise InputError("zero-shard", p.zero_shard, f"hybrid ZeRO-1 is modelled for transformers; {spec.name} "
                             "is described by explicit numbers: use zero-shard 0")
        return
    if spec.n_heads % p.tp or spec.n_kv_heads % p.tp:
        raise InputError("tp", p.tp, f"must divide the {spec.n_heads} attention heads and {spec.n_kv_heads} "
                         f"key/value heads of {spec.name}")
    layers = spec.n_layers + spec.n_encoder_layers
    if p.pp > layers:
        raise InputError("pp", p.pp, f"at most {layers} pipeline stages ({spec.name} has {layers} layers)")
    if cfg.seq_len % p.cp:
        raise InputError("cp", p.cp, f"must divide the sequence length {cfg.seq_len}")
    if spec.learned_pos_emb and not spec.positions_per_run and spec.max_seq_len and cfg.seq_len > spec.max_seq_len:
        raise InputError("seq-len", cfg.seq_len, f"at most {spec.max_seq_len} for {spec.name} "
                         "(learned position table)")


# ------------------------------------------------------------------ the estimate

def _stage_layers(n_layers: int, pp: int) -> list[int]:
    """Layers per stage; the remainder goes to the last stages (they hold fewer micro-batches)."""
    base, rem = divmod(n_layers, pp)
    return [base + (1 if i >= pp - rem else 0) for i in range(pp)]


def _act_bytes_per_value(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def _explicit_estimate(spec: ModelSpec, cfg: TrainingConfig, fp32_grads: bool, context: bool) -> MemoryEstimate:
    n = int(spec.explicit_params or 0)
    p = cfg.plan
    sb = state_bytes(cfg.precision, cfg.optimizer, 0, fp32_grads)
    w = n * sb.weights / (p.dp if p.zero >= 3 else 1)
    g = 0.0 if (cfg.offload_optimizer and p.zero >= 2) else n * sb.gradients / (p.dp if p.zero >= 2 else 1)
    o = 0.0 if cfg.offload_optimizer else n * sb.optimizer / (p.dp if p.zero >= 1 else 1)
    a = (spec.activation_bytes_per_sample or 0.0) * cfg.micro_batch * _act_bytes_per_value(cfg.precision) / 4
    slack, ctx, nccl = _overheads(cfg, w + g + o + a, context)
    act = spec.activation_bytes_per_sample
    acts = (f"{act / 1e6:.1f} MB of fp32 activations per {spec.sample_unit}" if act else
            "activations NOT counted (no activation_bytes_per_sample given: memory is a lower bound)")
    notes = (f"{spec.name}: {n:,} parameters and {acts} ({spec.source}); 16-bit activations take half",
             "ZeRO-paper state accounting (2/2/12 B mixed precision); recompute is not modelled for explicit "
             "(non-transformer) models", describe_overhead())
    return MemoryEstimate(w, g, o, a, slack + ctx + nccl, n, n, 0, notes, allocator=slack, context=ctx, nccl=nccl,
                          peak_phase="loss boundary")


def stack_model(spec: ModelSpec, cfg: TrainingConfig) -> ModelSpec:
    """The model as the run's stack builds it: a stack whose model class always has its own output matrix
    (data/stacks/model_code.csv separate_lm_head, LitGPT) unties a tied checkpoint's embedding, and a position
    table sized per run (ModelSpec.positions_per_run) gets the run's sequence length."""
    spec = for_seq_len(spec, cfg.seq_len)
    if spec.tied_embeddings and spec.is_transformer and model_code(cfg.stack).separate_lm_head:
        return replace(spec, tied_embeddings=False)
    return spec


def check_zero_shard(p) -> None:
    """A hybrid ZeRO-1 shard group (ParallelPlan.zero_shard) is ZeRO-1 over k ranks, k dividing dp x cp."""
    k, n = p.zero_shard, p.dp * p.cp
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise InputError("zero-shard", k, "use 0 (ZeRO over all dp x cp ranks) or a positive group size")
    if k and p.zero != 1:
        raise InputError("zero-shard", k, f"a shard group is hybrid ZeRO-1: use zero 1 (not {p.zero}) or zero-shard 0")
    if k and n % k:
        raise InputError("zero-shard", k, f"must divide dp x cp = {n} (e.g. {n} or the GPUs of one node)")


def _shard_group(cfg: TrainingConfig) -> int:
    """ZeRO / FSDP shard over dp x cp (context-parallel ranks hold the same weights)."""
    return cfg.plan.dp * cfg.plan.cp


def _schedule(cfg: TrainingConfig, interleave: int) -> str:
    if interleave > 1 and cfg.plan.pp_schedule == "1f1b":
        return f"interleaved-{interleave}"
    return cfg.plan.pp_schedule


def _overheads(cfg: TrainingConfig, allocated: float, context: bool) -> tuple[float, float, float]:
    """(allocator slack, CUDA context, NCCL) bytes for an `allocated` peak; the slack is the multi-GPU one when any
    parallel group has more than one rank (its collectives run on NCCL streams), else the one-GPU one of the stack
    (overhead.slack_terms: a fraction of the allocated peak plus fixed GiB)."""
    p = cfg.plan
    groups = (p.dp * p.cp, p.tp, p.pp, p.cp)
    multi = max(groups) > 1
    return allocator_slack_bytes(allocated, multi, cfg.stack), context_bytes(context), _nccl(groups) if context else 0.0


_nccl = lru_cache(maxsize=256)(nccl_bytes)     # a few group shapes per plan, ~6,000 estimates


@lru_cache(maxsize=16384)
def _estimate(spec: ModelSpec, cfg: TrainingConfig, fp32_grads: bool, lm_head: bool, interleave: int,
              context: bool) -> MemoryEstimate:
    check_config(spec, cfg)
    if not spec.is_transformer:
        return _explicit_estimate(spec, cfg, fp32_grads, context)
    if blocked(cfg):
        return _cannot_run(spec, cfg)
    p, lev = cfg.plan, resolve(cfg)
    fp32_grads = fp32_grads or lev.fp32_main_grad       # the stack's gradient buffer (Megatron main_grad)
    sem = _semantics(cfg.precision, cfg.optimizer, spec.hidden, p.zero, fp32_grads)
    schedule = _schedule(cfg, interleave)
    geo = _layout_geometry(spec, cfg, sem, lm_head, lev)
    best = None
    for i, load in enumerate(_stage_loads(spec, cfg, sem, lm_head, schedule, lev=lev, geo=geo)):
        alloc, phase, parts = peak_values(load)
        if best is None or alloc > best[0]:
            best = (alloc, i, phase, parts)
    alloc, stage, phase, (w, o, g, a, t) = best        # memory_timeline's part order
    total = geo.counts.total                   # param_counts(spec)'s
    trainable = adapter_params(spec, cfg.lora_rank, cfg.lora_targets, cfg.dora) if cfg.lora_rank > 0 else total
    # the assumption lines are built when first read (MemoryEstimate.notes): a search reads a few of thousands
    notes = partial(_assumptions, spec, cfg, sem, fp32_grads, stage, phase, schedule)
    return _from_parts(w, g, o, a, t, cfg, total, trainable, notes, phase, stage, context)


def estimate_from_parts(parts: dict[str, float], cfg: TrainingConfig, params: int, trainable: int,
                        notes: tuple[str, ...], peak_phase: str = "", peak_stage: int = 0,
                        context: bool = True, allocator: float | None = None) -> MemoryEstimate:
    """A MemoryEstimate from the tensor bytes at the peak by part (parameters, gradients, optimizer,
    activations, temporaries), estimated or traced: the overhead model (overhead.py) adds what tensors
    don't show (the fitted allocator slack, CUDA context, NCCL), so both methods share one schema;
    `allocator`: reserved - allocated simulated instead (gpuwise.trace.reserved), in place of the fitted slack."""
    w, g, o, a, t = (parts[k] for k in ("parameters", "gradients", "optimizer", "activations", "temporaries"))
    est = _from_parts(w, g, o, a, t, cfg, params, trainable, notes, peak_phase, peak_stage, context)
    if allocator is None:
        return est
    return replace(est, overhead=est.overhead - est.allocator + allocator, allocator=allocator)


def _precision_flags(sem: StateSemantics, zero: int, lora: bool, quantize: str | None, code) -> tuple[bool, bool, bool]:
    """(plain, autocast, fp32_rest) of a layout: an unsharded PyTorch rank (no FSDP, no DeepSpeed, not Megatron);
    torch.autocast over float32 weights on it; a 4-bit base whose stack casts every other parameter to float32 (PEFT
    prepare_model_for_kbit_training, model_code kbit_fp32_rest)."""
    plain = sem.framework == "torch" and zero == 0
    return plain, plain and sem.compute > 0, lora and quantize == "nf4" and code.kbit_fp32_rest


def _padding_mask_parts(padding: bool, micro_batch: int, seq_len: int, cp: int, precision: str, plain: bool,
                        autocast: bool, lora: bool, fp32_rest: bool) -> tuple[float, float]:
    """(the 4D padding mask, autocast's 16-bit cast of it kept by each layer's attention) in bytes (module docstring
    of `padding_mask_parts`)."""
    if not padding:
        return 0.0, 0.0
    # the mask is made in the input embeddings' dtype: float32 under fp32, under autocast over float32 weights (not
    # a frozen 16-bit base) and on a QLoRA recipe's float32 rest; 16-bit otherwise
    fp32_stream = precision == "fp32" or (autocast and not lora) or (fp32_rest and plain)
    per = micro_batch * (seq_len / cp) * seq_len
    return per * (4 if fp32_stream else 2), per * 2 if autocast and fp32_stream else 0.0


def padding_mask_parts(cfg: TrainingConfig) -> tuple[float, float]:
    """(mask, per-layer cast) bytes of --padding-mask, as the layout's geometry counts them: the b x 1 x s/cp x s
    additive mask (transformers 4.49 builds it in the input embeddings' dtype; newer versions a boolean one, 1 B), made
    once per forward and kept until the blocks' backward ends (an input of every checkpointed block; the attention
    kernel saves it for its backward), with the embedding's output in the timeline; and under autocast each attention
    call's 16-bit cast of a float32 mask (scaled_dot_product_attention casts every floating input), saved by that
    layer's kernel. The trace builds both in its decoder models."""
    sem = state_semantics(cfg.precision, cfg.optimizer, 0, cfg.plan.zero, resolve(cfg).fp32_main_grad)
    lora = cfg.lora_rank > 0
    plain, autocast, fp32_rest = _precision_flags(sem, cfg.plan.zero, lora, cfg.quantize, model_code(cfg.stack))
    return _padding_mask_parts(cfg.padding_mask, cfg.micro_batch, cfg.seq_len, cfg.plan.cp, cfg.precision, plain,
                               autocast, lora, fp32_rest)


def padding_mask_bytes(cfg: TrainingConfig) -> float:
    """The padding mask's bytes (`padding_mask_parts`)."""
    return padding_mask_parts(cfg)[0]


def padding_mask_copy_bytes(cfg: TrainingConfig) -> float:
    """Autocast's per-layer 16-bit cast of it (`padding_mask_parts`)."""
    return padding_mask_parts(cfg)[1]


def padding_mask_note(cfg: TrainingConfig) -> str:
    mask, copy = padding_mask_parts(cfg)
    return (f"padding mask: {mask / GIB:.2f} GiB ({cfg.micro_batch} x 1 x {cfg.seq_len // cfg.plan.cp:,}"
            f" x {cfg.seq_len:,} additive mask in the stream's dtype, transformers 4.49's sdpa path) kept through the "
            "step, in the activations" + (f"; under autocast each attention's 16-bit cast of it ({copy / GIB:.2f} GiB) "
                                          "is kept for that layer's backward" if copy else "")
            + ("; the memory-efficient kernel that reads it keeps no s^2 scores" if cfg.flash_attention else
               "; eager attention adds it to its scores"))


def _from_parts(w: float, g: float, o: float, a: float, t: float, cfg: TrainingConfig, params: int, trainable: int,
                notes, peak_phase: str, peak_stage: int, context: bool) -> MemoryEstimate:
    """`estimate_from_parts` of the parts parameters, gradients, optimizer, activations and temporaries."""
    slack, ctx, nccl = _overheads(cfg, sum((w, g, o, a, t)), context)     # summed in PARTS order
    return _new_estimate(w, g, o, a, slack + ctx + nccl, params, trainable, peak_stage, notes, t, slack, ctx, nccl,
                         peak_phase)


def _new_estimate(*values) -> MemoryEstimate:
    """``MemoryEstimate(*values)`` (every field, in order) without the frozen dataclass's __init__, which sets
    each field through object.__setattr__ (a search builds ~6,000 estimates): the same attributes in the same
    order, `notes` kept where its descriptor keeps it (tests/test_plan_candidates.py compares the two)."""
    est = object.__new__(MemoryEstimate)
    est.__dict__.update(zip(_ESTIMATE_SLOTS, values, strict=True))     # every field, none left unset
    return est


def _cannot_run(spec: ModelSpec, cfg: TrainingConfig) -> MemoryEstimate:
    """A layout the levers cannot run on (levers.blocked): never fits, so searches pass over it."""
    field_, _, why = blocked(cfg)
    n = param_count(spec)
    return MemoryEstimate(float("inf"), 0.0, 0.0, 0.0, 0.0, n, n, 0, (f"{field_}: {why}",), peak_phase="cannot run")


def required_lower_bound(model: ModelSpec | str, cfg: TrainingConfig) -> float:
    """Bytes that `estimate_memory(model, cfg).required` is at least, from the first and last pipeline
    stages only (the estimate is the largest peak over all stages): O(1) in pp where the estimate is
    O(pp), so searches over layouts evaluate in full only those whose bound beats their best so far.
    Equal to `required` whenever one of those stages holds the peak (stage 0 under 1F1B, usually)."""
    spec = stack_model(load_model(model), cfg)
    check_config(spec, cfg)
    if not spec.is_transformer or blocked(cfg):
        return _estimate(spec, cfg, False, True, 1, True).required
    p = cfg.plan
    sem = state_semantics(cfg.precision, cfg.optimizer, spec.hidden, p.zero, resolve(cfg).fp32_main_grad)
    loads = _stage_loads(spec, cfg, sem, True, _schedule(cfg, 1), only=tuple(sorted({0, p.pp - 1})))
    _, ctx, nccl = _overheads(cfg, 0.0, True)
    return max(peak_values(load)[0] for load in loads) + ctx + nccl


def saved_activation_bytes(model: ModelSpec | str, cfg: TrainingConfig) -> float:
    """Bytes one micro-batch's forward saves for backward on the first pipeline stage (what activation
    offload copies to the host and back)."""
    spec = stack_model(load_model(model), cfg)
    if not spec.is_transformer:
        return 0.0
    sem = state_semantics(cfg.precision, cfg.optimizer, spec.hidden, cfg.plan.zero, resolve(cfg).fp32_main_grad)
    load = _stage_loads(spec, cfg, sem, True, _schedule(cfg, 1), only=(0,), keep_saved=True)[0]
    return load.stack + load.emb


# The activation terms depend on the model and the ActivationSetting (micro-batch, sequence, tp, sp, cp,
# recompute, dtype) only, never on dp, ZeRO or grad_accum: the planner's ~7,600 estimates of one job share
# ~200 settings, so each term is computed once per setting (the same functions on the same arguments: the
# same floats as calling them directly).
_semantics = lru_cache(maxsize=1024)(state_semantics)
_stack_bytes = lru_cache(maxsize=16384)(act.stack_bytes)
_working_set_bytes = lru_cache(maxsize=16384)(act.working_set_bytes)
_backward_transient_bytes = lru_cache(maxsize=16384)(act.backward_transient_bytes)
_embedding_bytes = lru_cache(maxsize=16384)(act.embedding_bytes)
_head_bytes = lru_cache(maxsize=16384)(act.head_bytes)
_loss_transient_bytes = lru_cache(maxsize=16384)(act.loss_transient_bytes)


class _Geometry:
    """What a layout's stages hold that does not depend on dp, grad_accum or optimizer offloading: layer
    counts, per-GPU parameters and their bytes before ZeRO sharding, activation terms. The planner's
    thousands of estimates of one job share a few hundred of these (they differ in dp and grad_accum),
    so each stage's part is built once (`stage`, memoised) and `_stage_loads` only shards and schedules
    it: the same expressions on the same values, hence the same floats. `zero` is read only as zero == 0
    (autocast) and zero >= 3 (FSDP), so `_stage_loads` passes ZeRO-2 as 1 (`_geometry_zero`): stages 1 and 2
    differ in sharding only, which it applies per configuration (tests/test_plan_candidates.py compares them)."""

    def __init__(self, spec: ModelSpec, sem: StateSemantics, lm_head: bool, micro_batch: int, seq_len: int,
                 precision: str, recompute: str, flash: bool, lora_rank: int, quantize: str | None,
                 tp: int, pp: int, cp: int, sp: bool, zero: int, loss: str = "eager",
                 lora_targets: str = "q,v", low_norms: bool = False, compiled: bool = False, float8: bool = False,
                 stack: str = "pytorch", dropout: bool = False, padding_mask: bool = False, dora: bool = False,
                 dora_rerun: bool = False):
        self.spec, self.sem, self.lm_head, self.tp, self.pp, self.recompute = spec, sem, lm_head, tp, pp, recompute
        code = model_code(stack)                                        # the stack's own model / 4-bit code
        self.counts = counts = param_counts(spec)
        self.lora = lora = lora_rank > 0
        self.adapters_per_block = (adapter_params(spec, lora_rank, lora_targets, dora) / attention_blocks(spec) if lora
                                   else 0.0)
        plain, autocast, fp32_rest = _precision_flags(sem, zero, lora, quantize, code)
        self.fp32_rest, self.autocast = fp32_rest, autocast
        # the padding mask: kept, like the embedding's output, until the blocks' backward ends; under autocast each
        # layer keeps its attention's 16-bit cast of it
        self.mask, mask_copy = _padding_mask_parts(padding_mask, micro_batch, seq_len, cp, precision, plain, autocast,
                                                   lora, fp32_rest)
        self.frozen_other = 4 if precision == "fp32" or fp32_rest else 2     # frozen base: 16-bit unless fp32
        gptq = gptq_format(quantize) if lora else None
        self.frozen_linear = (code.nf4_bytes if quantize == "nf4" else gptq.bytes_per_weight if gptq
                              else self.frozen_other)
        # the output layer is a 4-bit linear too where the stack quantises every torch.nn.Linear (LitGPT)
        self.head_linear = self.frozen_linear if quantize == "nf4" and code.nf4_output_layer else self.frozen_other
        # a 4-bit output layer is dequantised to 16-bit for its matmul just before the loss (nf4_dequant_copies)
        self.head_dequant = (code.nf4_dequant_copies * 2 * spec.vocab_size * spec.hidden / tp
                             if self.head_linear != self.frozen_other and lm_head else 0.0)
        self.fsdp = fsdp = zero >= 3 and sem.framework == "torch"
        self.pp_fsdp = fsdp and pp > 1
        self.no_sync = fsdp and code.fsdp_unsharded_accum and not self.pp_fsdp     # FSDP1 no_sync accumulation
        self.t5 = spec.family == "t5"
        enc_rep = counts.layer_replicated * 2 // 3 if self.t5 else 0        # t5 encoder: 2 of the 3 norms
        self.enc_b = self._block(counts.encoder_layer, enc_rep, 1)
        self.dec_b = self._block(counts.layer, counts.layer_replicated, 2 if self.t5 else 1)
        fused_mlp = self._fused_lora_mlp(code, lora_targets)         # Unsloth's LoRA_MLP (model_code.csv lora_mlp)
        # without autocast a float32 residual stream makes every activation float32: bitsandbytes' Linear4bit casts
        # its output to its input's dtype (Linear4bit.forward: out.to(inp_dtype)) and the float32 adapters add to it
        # (unsharded PyTorch ranks only: FSDP's and DeepSpeed's 16-bit compute copies are not modelled float32)
        act_bytes = 4 if fp32_rest and plain and not autocast else _act_bytes_per_value(precision)
        dora_tok, dora_w, dora_made = (dora_layer_bytes(spec, lora_targets, tp, act_bytes, autocast,
                                                        lora and code.lora_input_cast and plain, dora_rerun,
                                                        quantize == "nf4")
                                       if lora and dora else (0.0, 0.0, 0.0))
        self.st = act.ActivationSetting(micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp,
                                        bytes_per_value=act_bytes, flash=flash,
                                        recompute=recompute, frozen_base=lora, low_norms=low_norms,
                                        compiled=compiled or fused_mlp, mlp_bwd_ffn=1 if fused_mlp else 2,
                                        fp8_inputs=precision == "fp8",
                                        adapted=lora_modules(lora_targets) if lora else frozenset(),
                                        sp_keeps_gathered=sem.framework == "torch",
                                        # fp32 embeddings and norms (fp32_rest): a float32 residual stream
                                        autocast=(autocast and not lora) or fp32_rest,
                                        hf_eager=sem.framework != "megatron",
                                        frozen_keeps_inputs=quantize == "nf4" and code.nf4_keeps_input,
                                        # LitGPT's RMSNorm upcasts its input; torch.nn.LayerNorm keeps it as it is
                                        norm_fp32=code.norm_fp32_input and spec.norm == "rmsnorm",
                                        norm_weight_fp32=code.norm_weight_fp32,
                                        kv_expanded=code.kv_expanded, qkv_view=code.qkv_view,
                                        attn_out_copy=code.attn_out_copy,
                                        # LoRA dropout: LitGPT's layers (its own rules) or PEFT-style ones
                                        lora_dropout=lora and dropout and code.lora_dropout,
                                        mask_copy=mask_copy,
                                        adapter_dropout=lora and dropout and not code.lora_dropout,
                                        lora_qkv_pad=lora and code.lora_qkv_pad,
                                        # PEFT's per-adapter input cast is a 16-bit copy under autocast (mixed precision)
                                        # PEFT's float32 adapters on an unsharded PyTorch rank (FSDP and DeepSpeed
                                        # compute on 16-bit copies of them): under autocast each adapted linear's
                                        # own 16-bit cast; in pure 16-bit training its own float32 copy (a float32
                                        # stream needs none)
                                        # (PEFT's GPTQ layer casts nothing under autocast)
                                        lora_input_cast=lora and code.lora_input_cast and autocast and not gptq,
                                        lora_input_fp32=lora and code.lora_input_cast and plain and not autocast
                                        and act_bytes < 4,
                                        logits_fp32_held=code.logits_fp32_held,
                                        loss_chunk_tokens=code.loss_chunk_tokens,
                                        chunk_logits_held=code.chunk_logits_held,
                                        # float32 linears without autocast write float32 outputs and logits
                                        fp32_outputs=fp32_rest and not autocast,
                                        nf4_stream_outputs=fp32_rest and autocast,
                                        # a GPTQ matmul keeps its dequantised fp16 weight for the input's gradient
                                        kept_weights=(2.0 * self._block_linear() if gptq else 0.0) + dora_w,
                                        dora_token_bytes=dora_tok)
        # DeepSpeed ZeRO-1/2 trains the model's own PyTorch loss (float32 cross-entropy); only Megatron-LM has its own
        self.loss = "megatron" if sem.framework == "megatron" and loss == "eager" else loss
        self.layers = _stage_layers(spec.n_encoder_layers + spec.n_layers, pp)
        self.starts = [0, *accumulate(self.layers)]
        self.bwd = _backward_transient_bytes(spec, self.st) if sem.framework == "torch" else 0.0
        if lora and quantize == "nf4":     # the stack's dequantisation of the block's largest 4-bit matrix
            self.bwd += code.nf4_dequant_work * act.largest_block_matrix(spec) / tp
        self.bwd += dora_made      # DoRA's weight norms, made again in the re-run forward (in the forward without it)
        if gptq:    # AutoGPTQ's temporaries while it re-dequantises the largest matrix, whose kept fp16 copy (in the
            # working set's weights) is written only after they are freed
            self.bwd += (gptq.dequant_peak_bytes - 2) * act.largest_block_matrix(spec) / tp
        # FSDP2 reduces the root group (embedding, final norm, output layer) once, at the end of backward:
        # the output layer's gradient, written first, stays unsharded in the compute dtype until then.
        # Without FSDP a tied output layer's gradient waits for the embedding's contribution instead, and
        # autograd sums the two out of place: three vocabulary-wide gradients at the embedding's backward.
        self.out_w = spec.vocab_size * spec.hidden / tp if lm_head else 0.0
        # autocast's 16-bit cast of a float32 frozen output layer, saved by its matmul until the layer's backward
        self.head_cast = self.out_w * sem.compute if fp32_rest and autocast else 0.0
        self.root_bwd = fsdp and not self.pp_fsdp and not lora
        self.tied_bwd = (not fsdp and sem.framework != "megatron" and spec.tied_embeddings and pp == 1
                         and not lora)
        # torchao Float8 with FSDP2: the block's parameters are all-gathered in fp8 (1 B each)
        self.gather_b = 1.0 if float8 and fsdp else sem.compute
        self._stages: dict = {}     # stage index, and its shape (`stage`) -> (fixed, made_of, values)

    def _block_linear(self) -> float:
        """Weight elements of one block's linear layers on one GPU (its quantised matrices: the block's parameters
        that TP splits; GPTQ runs are unsplit)."""
        return float(self.counts.layer - self.counts.layer_replicated) / self.tp

    def _fused_lora_mlp(self, code, lora_targets: str) -> bool:
        return self.lora and fused_lora_mlp(self.spec, code, lora_targets)

    def _block(self, n_params: int, n_rep: int, blocks: int) -> tuple[float, float, float]:
        """(per-GPU params, stored weight bytes, trainable params) of one layer after TP."""
        split = (n_params - n_rep) / self.tp
        if not self.lora:
            return split + n_rep, (split + n_rep) * self.sem.weights, split + n_rep
        ad = blocks * self.adapters_per_block / self.tp
        return split + n_rep + ad, split * self.frozen_linear + n_rep * self.frozen_other + ad * self.sem.weights, ad

    def _stale_inputs(self, n_layers: int) -> float:
        """The previous step's 4-bit-linear inputs still held at the loss boundary (activations.quant_input_bytes:
        the stage's layers and the output layer's input), where the stack's bitsandbytes keeps them."""
        st = self.st
        if not st.frozen_keeps_inputs:
            return 0.0
        head = st.micro_batch * st.seq_len / st.cp * self.spec.hidden * st.bytes_per_value if self.lm_head else 0.0
        return n_layers * act.quant_input_bytes(self.spec, st) + head + self.head_dequant

    def _loss_temp(self, n_layers: int) -> float:
        """What the last stage holds at its loss boundary beyond head_keep: the loss backward's transient, the previous
        step's 4-bit-linear inputs and dequantised output layer (_stale_inputs), autocast's output-layer cast. Where
        the loop holds float32 logits (LitGPT under Fabric), the previous step's graph dies when `loss` is rebound,
        before this loss's backward: then the larger of the end of the forward (the previous step's inputs, and the
        larger of the 16-bit logits chunks Fabric converts and the output layer's dequantised copies less the float32
        logits not yet made) and the loss backward (its float32 chunk gradients, or the output layer's dequantised
        copies with one 16-bit chunk gradient)."""
        st, spec = self.st, self.spec
        loss = _loss_transient_bytes(spec, st, self.lm_head, self.loss)
        if not (st.logits_fp32_held and self.lm_head and self.loss == "chunked"):
            return loss + self._stale_inputs(n_layers) + self.head_cast
        e16 = st.bytes_per_value if st.bytes_per_value < 4 else 0      # float32 logits need no conversion copy
        conv = st.micro_batch * st.seq_len / st.cp * spec.vocab_size * e16 / self.tp
        chunk = st.micro_batch * min(st.seq_len / st.cp, st.loss_chunk_tokens) * spec.vocab_size / self.tp
        fwd = self._stale_inputs(n_layers) - self.head_dequant + max(conv, self.head_dequant - conv)
        bwd = max(loss, self.head_dequant + chunk * st.bytes_per_value) if self.head_dequant else loss
        return max(fwd, bwd) + self.head_cast

    def _head_backward(self) -> tuple[float, float]:
        """A trainable output layer applied once per chunk of a loss that holds every chunk's logits (torchtune):
        the per-chunk weight gradients summed at its backward (act.chunked_head_backward_bytes); not under FSDP,
        whose root group is counted by its own phases."""
        st = self.st
        if not (st.chunk_logits_held and self.loss == "chunked" and not st.loss_chunk_tokens and self.lm_head
                and not self.lora and not self.fsdp):
            return 0.0, 0.0
        return act.chunked_head_backward_bytes(self.spec, st)

    def stage(self, i: int) -> tuple[dict, dict, list]:
        """(StageLoad fields that do not depend on dp / grad_accum / offloading, the numbers the others
        are made from, StageLoad's values in field order with those fields set and the configuration's,
        _PER_CONFIG, None: `_stage_loads` copies and fills them) of stage i; built on first use (long
        pipelines evaluate only the stages asked for)."""
        got = self._stages.get(i)
        if got is None:
            # _build reads the stage only as first / last, its layer count and its encoder layers: the middle stages
            # of an even split are built once
            n_i, start = self.layers[i], self.starts[i]
            shape = (i == 0, i == self.pp - 1, n_i, max(0, min(start + n_i, self.spec.n_encoder_layers) - start))
            got = self._stages.get(shape)
            if got is None:
                fixed, made_of = self._build(i)
                unset = FIELD_INDEX.keys() - fixed.keys()
                if unset != set(_PER_CONFIG):      # every field set exactly once
                    raise AssertionError(f"StageLoad fields: {sorted(unset ^ set(_PER_CONFIG))}")
                got = self._stages[shape] = (fixed, made_of, stage_values(fixed))
            self._stages[i] = got
        return got

    def _build(self, i: int) -> tuple[dict, dict]:
        spec, sem, counts, st, lora, tp = self.spec, self.sem, self.counts, self.st, self.lora, self.tp
        enc_b, dec_b, first, last = self.enc_b, self.dec_b, i == 0, i == self.pp - 1
        n_i, start = self.layers[i], self.starts[i]
        enc_i = max(0, min(start + n_i, spec.n_encoder_layers) - start)
        dec_i = n_i - enc_i
        cross = self.t5 and dec_i > 0
        flat = (counts.embedding / tp if first else 0.0)
        if last:
            flat += counts.final + counts.lm_head / tp
            if self.pp > 1 and spec.tied_embeddings:
                flat += spec.vocab_size * spec.hidden / tp       # output layer's copy of the embedding
        n_stage = enc_i * enc_b[0] + dec_i * dec_b[0] + flat
        w_bytes = enc_i * enc_b[1] + dec_i * dec_b[1] + flat * (self.frozen_other if lora else sem.weights)
        if last and lora:                                # a quantised output layer (head_linear) instead of 16-bit
            w_bytes += counts.lm_head / tp * (self.head_linear - self.frozen_other)
        trainable = enc_i * enc_b[2] + dec_i * dec_b[2] + (0.0 if lora else flat)
        big = max(enc_b[0] if enc_i else 0.0, dec_b[0] if dec_i else 0.0)
        big_train = max(enc_b[2] if enc_i else 0.0, dec_b[2] if dec_i else 0.0)
        # autocast's casts that outlive the forward: only blocks that keep their saved tensors hold them
        # (a checkpointed block's casts are not saved, and the autocast cache ends with the forward)
        keep_enc, keep_dec = _cast_keeping_blocks(self.recompute, enc_i), _cast_keeping_blocks(self.recompute, dec_i)
        cast_params = keep_enc * enc_b[2] + keep_dec * dec_b[2] + (counts.lm_head / tp if last and not lora else 0.0)
        fsdp, pp_fsdp, autocast, root_bwd, out_w = self.fsdp, self.pp_fsdp, self.autocast, self.root_bwd, self.out_w
        fixed = dict(
            stage_compute=n_stage * sem.compute if pp_fsdp else 0.0,
            # autocast casts trainable fp32 weights only (a LoRA base is stored in 16-bit or NF4); each
            # micro-batch's forward keeps its own casts for its backward (the cache ends with the forward)
            casts=cast_params * sem.compute if autocast else 0.0,
            layer_stack=_stack_bytes(spec, st, 1, cross) if n_i else 0.0,
            block_cast=big_train * sem.compute if autocast else 0.0,
            acc_grads=trainable * sem.reduce if pp_fsdp else 0.0,
            block_compute=big * self.gather_b if fsdp and not pp_fsdp else 0.0,
            block_grad_temp=(big_train * (sem.compute + (0.0 if pp_fsdp else sem.reduce)) if fsdp else 0.0),
            head_compute=flat * sem.compute if fsdp and not pp_fsdp else 0.0,   # the root group stays gathered
            stack=(enc_i * _stack_bytes(spec, st, 1) + _stack_bytes(spec, st, dec_i, self.t5) if n_i else 0.0),
            work=_working_set_bytes(spec, st, cross),
            bwd_temp=self.bwd,
            emb=(_embedding_bytes(spec, st) if first else 0.0) + self.mask,
            head_keep=_head_bytes(spec, st, self.lm_head, self.loss) if last else 0.0,
            loss_temp=self._loss_temp(n_i) if last else 0.0,
            **dict(zip(("head_bwd_keep", "head_bwd"), self._head_backward() if last else (0.0, 0.0))),
            head_grad=out_w * sem.compute if root_bwd and last else 0.0,
            embed_temp=(flat * sem.compute + out_w * sem.compute * (3 if spec.tied_embeddings else 2)
                        + big_train * sem.reduce if root_bwd and first and self.lm_head else
                        3 * out_w * sem.gradients if self.tied_bwd else 0.0))
        made_of = dict(w_bytes=w_bytes, trainable=trainable, flat=flat,
                       grads=trainable * sem.gradients, opt=trainable * sem.optimizer,
                       late=max(0.0, trainable - (0.0 if lora else flat) - big_train) * sem.gradients,
                       embed=(trainable - flat) * sem.gradients,
                       root=fsdp and not pp_fsdp and not lora, big_train=big_train)
        return fixed, made_of


_geometry = lru_cache(maxsize=1024)(_Geometry)   # a plan of one job uses ~300


def _layout_geometry(spec: ModelSpec, cfg: TrainingConfig, sem, lm_head: bool, lev) -> _Geometry:
    """The geometry of ``cfg``'s layout (memoised: `_geometry`)."""
    p = cfg.plan
    return _geometry(spec, sem, lm_head, cfg.micro_batch, cfg.seq_len, cfg.precision, cfg.recompute,
                     cfg.flash_attention, cfg.lora_rank, cfg.quantize, p.tp, p.pp, p.cp, p.sp,
                     _geometry_zero(p.zero), lev.loss_kernel, cfg.lora_targets, lev.low_norms, cfg.compile,
                     cfg.float8, cfg.stack, dropout_p(cfg) > 0, cfg.padding_mask, cfg.dora, dora_reruns_frozen(cfg))


def _geometry_zero(zero: int) -> int:
    """The ZeRO stage as _Geometry reads it (zero == 0, zero >= 3): 1 and 2 share a geometry."""
    return 1 if zero == 2 else zero

# the StageLoad fields `_stage_loads` sets per configuration (the others are the geometry's), by position
_PER_CONFIG = ("weights", "grads", "optimizer", "accumulating", "late_grads", "opt_temp", "in_flight",
               "root_grad_temp", "embed_grads", "held_grads")
_W, _G, _O, _ACC, _LATE, _OPT_T, _HELD, _ROOT_T, _EMB_G, _HELD_G = (FIELD_INDEX[f] for f in _PER_CONFIG)


def _stage_loads(spec: ModelSpec, cfg: TrainingConfig, sem, lm_head: bool, schedule: str,
                 only: tuple[int, ...] | None = None, keep_saved: bool = False, lev=None,
                 geo: _Geometry | None = None) -> list[StageLoad]:
    """One StageLoad per pipeline stage (see memory_timeline); `only`: just those stages, in order;
    keep_saved: count the saved activations as if none were offloaded (what offloading copies);
    lev, geo: `resolve(cfg)` and `_layout_geometry(...)` where the caller has them."""
    p = cfg.plan
    lev = resolve(cfg) if lev is None else lev
    geo = _layout_geometry(spec, cfg, sem, lm_head, lev) if geo is None else geo
    n_shard = _shard_group(cfg)
    z3 = n_shard if p.zero >= 3 else 1
    z2 = n_shard if p.zero >= 2 else 1
    z1 = p.state_shards if p.zero >= 1 else 1
    micro, offload = cfg.grad_accum, cfg.offload_optimizer
    # levers (levers.py): what leaves the GPU, and what is never alive all at once
    host_states, in_bwd = cfg.cpu_offload, cfg.optimizer_in_backward
    # FSDP1 CPU offload: the step reads the host copies, but every block's gradient shard is on the GPU from its
    # reduce-scatter to the end of that backward (levers.offload_grads_held)
    grads_held = geo.fsdp and offload_grads_held(cfg.stack, host_states, in_bwd, p.pp)
    act_off = (cfg.activation_offload or lev.offload_checkpoints) and not keep_saved   # levers.activation_offload
    out = []
    for i in (range(p.pp) if only is None else only):
        fixed, m, values = geo.stage(i)
        grads = 0.0 if host_states or in_bwd else m["grads"] / z2
        opt = 0.0 if host_states or lev.paged else m["opt"] / z1
        if offload:
            opt, grads = 0.0, (0.0 if p.zero >= 2 else grads)
        v = values.copy()                       # StageLoad's values in field order; the fixed ones set
        if in_bwd or act_off:
            v = stage_values(_lever_fixed(fixed, m, sem, geo, cfg, act_off))
        if geo.no_sync and micro > 1:
            # FSDP1 no_sync: the micro-batches before the syncing one accumulate unsharded gradients, alive from the
            # first backward to the syncing micro-batch's reduce-scatter; on the GPU under CPU offload too (the
            # post-backward hook returns before the reduce-scatter and the host copy). Autograd accumulates them in
            # the gathered parameters' dtype (FSDP1 MixedPrecision param_dtype: bf16 under accelerate's bf16,
            # FullyShardedDataParallelPlugin.set_mixed_precision), not the sharded master's
            v[FIELD_INDEX["acc_grads"]] = m["trainable"] * sem.compute
        held = in_flight(schedule, p.pp, i, micro)
        v[_W], v[_G], v[_O] = 0.0 if host_states else m["w_bytes"] / z3, grads, opt
        # Megatron's main_grad buffer persists between steps; PyTorch and DeepSpeed free gradients at
        # zero_grad (set_to_none)
        # earlier micro-batches' gradients exist at the peak when a forward follows a backward
        # (more micro-batches than this stage keeps in flight)
        v[_ACC] = micro > held or sem.framework == "megatron"
        v[_LATE] = (m["late"] / z2 if grads_held or (micro == 1 and not geo.pp_fsdp and not offload
                                                    and not host_states and not in_bwd) else 0.0)
        v[_OPT_T] = 0.0 if host_states or in_bwd else _optimizer_temp(cfg, lev, sem, m["trainable"] / z1)
        v[_HELD] = held
        v[_ROOT_T] = m["flat"] * (sem.compute + sem.reduce - sem.reduce / z3) if m["root"] else 0.0
        # (with accumulation the earlier micro-batches' gradients of the root are there too)
        v[_EMB_G] = ((grads if micro > 1 and geo.tied_bwd else 0.0 if (host_states and not grads_held) or in_bwd
                      else m["embed"] / z2) if (geo.root_bwd or geo.tied_bwd) and i == 0 else 0.0)
        v[_HELD_G] = m["embed"] / z2 if grads_held else 0.0
        out.append(StageLoad(*v))
    return out


def _lever_fixed(fixed: dict, m: dict, sem, geo, cfg: TrainingConfig, act_off: bool) -> dict:
    """A stage's fixed terms under optimizer-in-backward (the block's own gradients in the gradient dtype
    are alive until their hooks step them, FSDP already counts them) and activation offload, asked for or the
    stack's offloaded checkpoints (only ACT_OFFLOAD_RESIDENT blocks' saved activations stay on the GPU)."""
    f = dict(fixed)
    if cfg.optimizer_in_backward and not geo.fsdp:
        f["block_grad_temp"] += m["big_train"] * sem.gradients
    if act_off:
        f["stack"] = min(f["stack"], ACT_OFFLOAD_RESIDENT * f["layer_stack"])
    return f


def _cast_keeping_blocks(recompute: str, n_blocks: int) -> int:
    """Blocks of `n_blocks` whose autocast weight casts stay alive from forward to backward. Autocast
    caches a weight's 16-bit cast only until the autocast region ends (the forward); after it, a cast
    lives on only if autograd saved it for the matmul's input gradient. torch.utils.checkpoint (full,
    layer-K) saves nothing inside a checkpointed block, and op-level SAC saves op outputs, never the
    casts (an aten._to_copy it recomputes), so those blocks re-cast their weights in backward (the one
    block recomputing holds them: `block_cast` / the working set)."""
    pol = recompute_policy(recompute)
    if pol.kind in ("full", "op"):
        return 0
    return n_blocks - n_blocks // pol.every if pol.kind == "layer" else n_blocks   # every K-th block checkpointed




def _optimizer_temp(cfg: TrainingConfig, lev, sem, local_trainable: float) -> float:
    # fused (torchtitan's default) and per-tensor loops make no step-wide temporaries; foreach (PyTorch's own CUDA
    # default, the HF Trainer's adamw_torch) allocates sqrt(v) for every parameter of the step
    if (lev.optimizer_impl != "foreach" or sem.framework != "torch" or cfg.offload_optimizer
            or cfg.optimizer not in ("adam", "adamw")):
        return 0.0
    return local_trainable * (2 if cfg.precision == "bf16" else 4)


def _states_text(precision: str, optimizer: str, zero: int, sem: StateSemantics) -> str:
    head = (f"{precision} + {optimizer}: {sem.weights:g} B weights, {sem.gradients:g} B gradients, "
            f"{sem.optimizer:.4g} B optimizer state per trainable parameter")
    if sem.framework == "megatron":
        return head + " (Megatron-LM: 16-bit weights, fp32 main_grad, fp32 master + moments)"
    if sem.framework == "deepspeed":
        return head + f" (DeepSpeed ZeRO-{zero}: ZeRO-paper accounting)"
    if zero >= 3:
        mp = (f"MixedPrecisionPolicy(param_dtype={'fp16' if precision == 'fp16-mixed' else 'bf16'}, "
              "reduce_dtype=fp32)" if "mixed" in precision else f"{precision} throughout")
        return (head + f" (FSDP2 fully_shard, {mp}: sharded {sem.weights:g}-byte parameters are the master "
                f"weights; each block's {sem.compute:g}-byte unsharded copy is all-gathered for forward and "
                "backward, with the next block prefetched)")
    if sem.compute:
        return (head + " (PyTorch autocast over fp32 parameters: no separate master copy; the cached 16-bit casts "
                "of the matmul weights stay alive from forward until their backward)")
    return head + " (PyTorch, one dtype throughout)"


@lru_cache(maxsize=1024)   # the same few lines for every dp and grad_accum of a layout (searches ask ~10^4 times)
def _layout_notes(spec: ModelSpec, sem: StateSemantics, precision: str, optimizer: str, zero: int, flash: bool,
                  recompute: str, tp: int, sp: bool) -> tuple[str, ...]:
    """The assumption lines that depend on neither dp, the pipeline stage nor grad_accum: the model, the
    state bytes, the activations and sequence parallelism."""
    return (
        f"{spec.name}: {param_count(spec):,} parameters ({spec.source or 'structure from config.json'})",
        _states_text(precision, optimizer, zero, sem),
        "activations: Korthikanti et al. 2022 per-tensor accounting generalised to GQA"
        + (", gated MLP (4 tensors of ffn width)" if spec.gated_mlp else "")
        + (f", MoE top-{spec.experts_per_token} of {spec.n_experts}" if spec.n_experts > 1 else "")
        + ("; dropout masks kept" if act.has_dropout(spec) else "; no dropout")
        + ("; flash attention (no s^2 scores; its backward's float32 dQ accumulator and GQA-expanded dK/dV are "
           "alive after the MLP's backward freed more: not counted)" if flash
           else "; eager attention keeps s^2 scores, and its softmax backward holds two score-sized gradients")
        + _gemma2_text(spec, flash)
        + ("; qwen3's q/k RMSNorms (their saved inputs and weights) not counted" if spec.family == "qwen3" else "")
        + f"; recompute {recompute} ({_RECOMPUTE_TEXT[recompute_policy(recompute).kind]})",
        f"sequence parallel {'on' if sp else 'off'}" + (" (the frameworks' default with tp > 1)" if tp > 1 else "")
        + ("; as DTensor does it (torchtitan): the QKV and MLP-input linears keep the all-gathered input"
           if sp and sem.framework == "torch" else ""))


def _gemma2_text(spec: ModelSpec, flash: bool) -> str:
    """What Gemma 2's structure adds to the activation accounting (empty for other models)."""
    out = "; 4 norms per block (pre and post each branch), each keeps its input" if spec.post_norms else ""
    if spec.attn_softcap:
        out += (f"; attention soft-capping (cap {spec.attn_softcap:g}) " + (
            "inside the flash kernel (flash-attn >= 2.6; transformers 4.49's SDPA path drops it): nothing kept"
            if flash else "keeps tanh's s^2 output as well"))
    if spec.sliding_window:
        n = spec.sliding_every
        out += (f"; sliding window {spec.sliding_window} on layers 0, {n}, {2 * n}, ...: no tensor changes (eager "
                "attention still makes s^2 scores, flash attention keeps none)")
    if spec.final_softcap:
        out += f"; final-logit soft-capping (cap {spec.final_softcap:g}) keeps tanh's logits-sized output"
    return out


@lru_cache(maxsize=16)
def _stack_text(stack: str) -> str:
    return stack_row(stack).describe()


def _loss_cfg(cfg: TrainingConfig, sem: StateSemantics) -> TrainingConfig:
    """`cfg` with the loss the estimate used (Megatron's own when its semantics are asked for)."""
    if sem.framework == "megatron" and resolve(cfg).loss_kernel == "eager":
        return replace(cfg, loss_kernel="megatron")
    return cfg


def _assumptions(spec: ModelSpec, cfg: TrainingConfig, sem: StateSemantics, fp32_grads: bool, stage: int,
                 phase: str, schedule: str) -> list[str]:
    p = cfg.plan
    lora = cfg.lora_rank > 0
    model, states, acts, seq = _layout_notes(spec, sem, cfg.precision, cfg.optimizer, p.zero,
                                                   cfg.flash_attention, cfg.recompute, p.tp, p.sp)
    out = [
        model, states,
        (f"hybrid ZeRO-1: optimizer states sharded over groups of {p.zero_shard} of the dp x cp = {p.dp * p.cp} "
         "ranks (InternEvo zero1 size); weights and gradients whole on every rank" if p.zero_shard else
         f"ZeRO stage {p.zero} shards over dp x cp = {p.dp * p.cp} ranks")
        + ("; under pipeline parallelism FSDP2 keeps the stage unsharded (reshard_after_forward=False) and "
           "accumulates unsharded fp32 gradients until the last micro-batch" if p.zero >= 3 and p.pp > 1 else ""),
        acts, *lever_notes(_loss_cfg(cfg, sem), cfg.lora_rank and adapter_params(spec, cfg.lora_rank, cfg.lora_targets, cfg.dora)
                           or param_count(spec)), seq,
        f"peak: {phase}" + (f" on pipeline stage {stage}" if p.pp > 1 else "") + " (gpuwise.estimate.memory_timeline)",
        kernel_note(cfg),
        describe_overhead(),
        _stack_text(cfg.stack),
    ]
    out.extend(positions_note(spec))
    if cfg.padding_mask:
        out.append(padding_mask_note(cfg))
    if cfg.dora:
        out.append(dora_note(cfg))
    if p.pp > 1:
        out.append(f"pipeline schedule {schedule}: stage {stage} holds {in_flight(schedule, p.pp, stage, cfg.grad_accum):g} "
                   f"of {cfg.grad_accum} micro-batches at its peak")
    if p.cp > 1:
        out.append(f"context parallel cp={p.cp} splits the sequence; model states sharded over dp x cp under ZeRO")
    if lora:
        p_drop = dropout_p(cfg)
        out.append(f"LoRA rank {cfg.lora_rank}: {targets_text(cfg.lora_targets)}; frozen base (16-bit unless fp32); inputs that feed "
                   "only frozen matrices are not kept for backward; LoRA dropout "
                   + ("0 (none)" if p_drop <= 0 else f"{p_drop:g}: " + (
                       "the stack's LoRA layers keep their dropout outputs and masks (its model code, below)"
                       if model_code(cfg.stack).lora_dropout else
                       "each adapted linear keeps its dropout mask and its adapter's own input")))
    code = describe_code(cfg.stack)
    if code:
        out.append(code)
    if gptq_format(cfg.quantize):
        out.append(gptq_note(cfg.quantize))
    elif cfg.quantize and not code:
        out.append(f"NF4 base: {NF4_BYTES:.3f} B per linear-layer weight (QLoRA double quantisation); "
                   "embeddings, norms and output layer in 16-bit")
    if cfg.offload_optimizer:
        out.append("optimizer states and master weights in host memory"
                   + (" (gradients reduced to host too: ZeRO>=2)" if p.zero >= 2 else ""))
    return out


_RECOMPUTE_TEXT = {
    "none": "every activation kept",
    "selective": "Megatron-core: the attention core is recomputed",
    "op": "torchtitan op-level SAC: every second matmul output and the attention output kept, the block "
          "recomputed in backward",
    "layer": "torchtitan layer SAC: every K-th block keeps only its input",
    "full": "every block keeps only its input; one block re-materialised in backward",
}


def estimate_memory(model: ModelSpec | str, cfg: TrainingConfig, gpu: GpuSpec | None = None, *,
                    fp32_grads: bool = False, lm_head: bool = True, interleave: int = 1,
                    context: bool = True, memoise: bool = True) -> MemoryEstimate:
    """Per-GPU peak memory of one training step.

    model: ModelSpec or preset name / config.json path
    cfg: training settings and the parallel plan (cfg.micro_batch is per GPU)
    gpu: only used to add a headroom line to the assumptions
    fp32_grads: fp32 gradient buffer (Megatron-LM main_grad) instead of gradients in the weights' dtype
    lm_head: compute vocabulary logits (False for classification heads)
    interleave: virtual pipeline chunks per stage (Megatron interleaved 1F1B; same as
        plan.pp_schedule = "interleaved-V")
    context: include the CUDA context and NCCL buffers in the overhead (False to compare with
        allocated-tensor peaks; the allocator slack is always included in `overhead`; compare
        `allocated` with torch.cuda.max_memory_allocated)
    memoise: keep the estimate in this module's cache (False: a caller that keeps its estimates itself, the
        layout search's ~6,000 distinct ones; the same estimate either way)
    """
    spec = stack_model(load_model(model), cfg)
    est = (_estimate if memoise else _estimate.__wrapped__)(spec, cfg, fp32_grads, lm_head, interleave, context)
    if gpu is not None:
        est = replace(est, notes=est.notes + (est.fit_text(gpu),))
    return est


def cache_text(total_gib: float, device_gib: float) -> str:
    """What nvidia-smi shows with the allocator's cache (`total_gib`, MemoryEstimate.per_gpu_gib): that total, or,
    where the slack measured with memory to spare would take it past the card, that the cache stops at the card."""
    if total_gib <= device_gib:
        return f"nvidia-smi shows {total_gib:.1f} GiB with the allocator's cache, which it frees under pressure"
    return (f"nvidia-smi shows the card about full: the allocator's cache would reach {total_gib:.1f} GiB with memory "
            f"to spare, above the card's {device_gib:.1f}, and is freed under pressure")


def fused_lora_mlp(spec: ModelSpec, code, lora_targets: str) -> bool:
    """The stack's fused LoRA MLP runs (a gated MLP with adapters on gate, up and down): it keeps gate and up only,
    as torch.compile's partitioner does (ActivationSetting.compiled), and makes one ffn-wide gradient."""
    return code.lora_mlp_fused and spec.gated_mlp and {"gate", "up", "down"} <= lora_modules(lora_targets)
