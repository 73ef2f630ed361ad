"""Per-operator roofline step time of transformer training, with communication.

Compute: every row of the operator inventory (``op_inventory.py``: forward, backward, recompute) takes
``max(FLOPs / (peak x eff[class]), bytes / (HBM x eff_mem)) + kernels x launch``; GEMM efficiency
falls for narrow per-GPU matrices (w / (w + w0), w = smallest GEMM dimension after the tp split);
elementwise FLOPs run on the vector (non-tensor) units. Efficiencies per GPU architecture come from
``gpuwise/data/calibration/op_efficiency.csv`` (fitted on public measurements, see that file).

Communication (ring collectives, ``comm.py``), with these overlap assumptions:
- tensor parallel: 8 all-gather/reduce-scatter-sized transfers of the micro-batch's activations per
  layer (Megatron with sequence parallelism: 2 AG + 2 RS forward, as many backward; without SP the
  2 + 2 all-reduces move the same volume), +4 with full recompute; exposed, unless AsyncTP is on and the
  TP group fits in a node: then chunked against the GEMMs (``tp_exposed_s``).
- context parallel: ring exchange of each rank's K/V chunk, (cp-1) steps forward and twice that
  backward (K/V and their gradients), overlapped with the attention core of the same layer.
- pipeline: 1F1B with ``v`` virtual stages: bubble = (pp-1)/v micro-steps of the busiest stage
  (Narayanan et al. 2021); activation send/receive between stages is exposed.
- data parallel over dp x cp ranks (gradients of context-parallel ranks are reduced too): each collective
  hides only behind the phase it can run alongside (``overlap_windows``: a micro-step's forward and backward
  seconds, split by the operator inventory's phase shares; recompute's re-forward runs inside backward and
  counts as backward). ZeRO-0/1/2 = one reduce-scatter + all-gather (all-reduce volume) of the stage's bf16
  gradients per step, launched by gradient hooks in buckets, so it overlaps up to ``DP_OVERLAP`` of the LAST
  micro-step's backward only (the forward runs before any gradient exists); ZeRO-3/FSDP = per micro-step a
  parameter all-gather in forward, prefetched behind up to ``FSDP_OVERLAP`` of the forward, and a parameter
  all-gather + gradient reduce-scatter in backward, behind up to ``FSDP_OVERLAP`` of the backward.
- placement: ranks are ordered tp (innermost), cp, dp, pp; a group inside one node runs at the GPU's
  NVLink/PCIe bandwidth, one spanning nodes at min(intra, ranks-per-node x NIC share per GPU).
- optimizer: Adam update over the locally owned parameters, memory-bound (``OPTIMIZER_BYTES`` per
  parameter read + written at the fitted memory efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from gpuwise.data import data_path, read_commented_csv
from gpuwise.estimate import comm
from gpuwise.estimate.lora import NF4_BYTES
from gpuwise.estimate.op_inventory import ATTN, GEMM, MEM, micro_step_work, op_table, reforwarded_blocks
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

DP_OVERLAP = 0.8            # share of the last micro-step's backward that hides the DP gradient reduction
FSDP_OVERLAP = 0.8          # share of a micro-step's forward (backward) that hides FSDP's forward gather (backward
                            # gather + gradient reduce-scatter)
TP_TRANSFERS = 8            # activation-sized ring transfers per layer per micro-step (SP: 4 fwd + 4 bwd)
OPTIMIZER_BYTES = 30.0      # Adam with fp32 master: read param, grad, m, v (16) + write param, m, v, bf16 copy (14)
OPTIMIZER_KERNELS = 6       # multi-tensor apply: a few launches per step
EIGHT_BIT_SAVING = 12.0     # 8-bit moments (bitsandbytes): 1-byte m and v read and written instead of 4-byte ones
# torch.optim.AdamW / Adam without fused=True (optimizer_impl foreach or per-param: torch.optim.adam's
# _multi_tensor_adam / _single_tensor_adam, capturable=False) run the update as separate elementwise passes over
# fp32 tensors, counted from that source (4 bytes a value): decoupled weight decay p*=c (read p, write p: 8),
# lerp m toward g (12), v*=beta2 (8), v+=c*g*g (12), s=sqrt(v) (8), s/=bc2 (8), s+=eps (8), p+=k*m/s (16) =
# 80 bytes per parameter for AdamW (Adam with its default weight_decay=0 skips the first pass: 72) against the
# fused kernel's 28 (read p, g, m, v; write p, m, v).
UNFUSED_ADAM_EXTRA_BYTES = {"adamw": 80.0 - 28.0, "adam": 72.0 - 28.0}


def optimizer_bytes(optimizer: str, impl: str = "fused") -> float:
    """HBM bytes per local parameter of one optimizer update (``impl``: the resolved optimizer_impl lever)."""
    from gpuwise.estimate.model_states import EIGHT_BIT

    unfused = UNFUSED_ADAM_EXTRA_BYTES.get(optimizer, 0.0) if impl in ("foreach", "per-param") else 0.0
    return OPTIMIZER_BYTES - (EIGHT_BIT_SAVING if optimizer in EIGHT_BIT else 0.0) + unfused


@dataclass(frozen=True)
class OpEfficiency:
    """Fitted per-class efficiencies of one GPU architecture under one software stack (op_efficiency.csv)."""

    architecture: str
    stack: str                 # workload.training.STACKS: whose kernels (and host overhead) were measured
    gemm: float
    gemm_w0: float
    attention: float
    memory: float
    launch_s: float
    points: int
    fitted_on: str

    @cached_property
    def text(self) -> str:
        return self.describe()

    def describe(self) -> str:
        how = f"fitted on {self.points} public measurements ({self.fitted_on})" if self.points else \
            f"assumption ({self.fitted_on})"
        return (f"compute efficiency, per-op roofline {self.architecture} under the {self.stack} stack: GEMM {self.gemm:.0%} of tensor peak x w/(w+{self.gemm_w0:.0f}), "
                f"flash attention {self.attention:.0%}, HBM {self.memory:.0%} of bandwidth, "
                f"{self.launch_s * 1e6:.1f} us per kernel; {how}")


@lru_cache(maxsize=1)
def op_efficiency_table() -> dict[tuple[str, str], OpEfficiency]:
    """{(architecture, stack): efficiencies}; architecture "default" rows serve GPUs without a fitted row."""
    out = {}
    for r in read_commented_csv(data_path("calibration", "op_efficiency.csv")):
        out[r["architecture"], r["stack"]] = OpEfficiency(
            r["architecture"], r["stack"], float(r["gemm"]), float(r["gemm_w0"]), float(r["attention"]),
            float(r["memory"]), float(r["launch_us"]) * 1e-6, int(r["points"]), r["fitted_on"])
    return out


def op_efficiency_for(gpu: GpuSpec, stack: str = "pytorch") -> OpEfficiency:
    """The fitted row of ``gpu``'s architecture under ``stack``; a stack without fitted rows (stacks.csv
    column efficiency) takes the rows of the stack it names, and says so; InputError for an unknown stack."""
    return op_efficiency(gpu.architecture.split()[0], stack)


@lru_cache(maxsize=256)
def op_efficiency(arch: str, stack: str) -> OpEfficiency:
    """The efficiencies of GPU architecture ``arch`` under ``stack`` (op_efficiency_for, by architecture name)."""
    from gpuwise.workload.stacks import stack_row

    stack_row(stack)                                 # InputError naming the stacks
    t = op_efficiency_table()
    if (arch, stack) in t or ("default", stack) in t:
        return t.get((arch, stack), t.get(("default", stack)))
    return scaled_efficiency(base_efficiency(arch, stack), stack_factor(stack))


def base_efficiency(arch: str, stack: str) -> OpEfficiency:
    """The op_efficiency.csv row a stack without rows of its own is timed with (the stack it names in stacks.csv)."""
    from gpuwise.workload.stacks import stack_row

    fallback = stack_row(stack).efficiency
    t = op_efficiency_table()
    return t.get((arch, fallback), t["default", fallback])


@dataclass(frozen=True)
class StackFactor:
    """One row of calibration/stack_efficiency.csv: a stack's multiplicative kernel efficiency."""

    stack: str
    factor: float
    points: int
    sources: str
    fitted_on: str


@lru_cache(maxsize=1)
def stack_factor_table() -> dict[str, StackFactor]:
    """{stack: StackFactor}: every row of calibration/stack_efficiency.csv, the ``default`` row included."""
    return {r["stack"]: StackFactor(r["stack"], float(r["factor"]), int(r["points"]), r["sources"], r["fitted_on"])
            for r in read_commented_csv(data_path("calibration", "stack_efficiency.csv"))}


def stack_factor(stack: str) -> StackFactor:
    """The stack's fitted factor, or the stated default row (factor 1.0) for a stack without measured rows."""
    t = stack_factor_table()
    if stack in t:
        return t[stack]
    d = t["default"]
    return replace(d, stack=stack, fitted_on=f"no {stack} rows are measured: default factor {d.factor:g} ({d.fitted_on})")


MAX_TENSOR_EFFICIENCY = 0.95   # a scaled GEMM / attention efficiency never exceeds this share of peak


def scaled_efficiency(row: OpEfficiency, f: StackFactor) -> OpEfficiency:
    """``row`` (another stack's fitted efficiencies) timed for stack ``f.stack``: GEMM and flash-attention efficiency
    x ``f.factor`` (capped), the rest unchanged; says so in ``fitted_on``."""
    how = (f"GEMM and attention x {f.factor:.3f}: stack factor fitted on {f.points} measured {f.stack} rows ({f.sources}; "
           "calibration/stack_efficiency.csv)" if f.points else f.fitted_on)
    return replace(row, stack=f.stack, gemm=min(MAX_TENSOR_EFFICIENCY, row.gemm * f.factor),
                   attention=min(MAX_TENSOR_EFFICIENCY, row.attention * f.factor),
                   fitted_on=f"no {f.stack} row is fitted: the {row.stack} row stands in, {how}; {row.stack} row: "
                             f"{row.fitted_on}")


# Flash-attention efficiency grows with the keys each query block sweeps: per query tile the kernel has a fixed cost
# (load Q, rescale and write O and the log-sum-exp; in backward write dQ) besides the work per key tile, so its
# efficiency is e x ctx / (ctx + ATTN_CTX_HALF). op_efficiency.csv's attention constants are the kernels' fwd+bwd rates
# at 2k-8k causal tokens (ATTN_REF_SEQ = 4096 taken as the reference). ATTN_CTX_HALF = two 128-key tiles of fixed work
# per query tile: a stated assumption, not fitted (it puts a 512-token causal kernel at ~0.6x and a 32k-64k one at
# ~1.1x of the reference rate).
ATTN_CTX_HALF = 256.0
ATTN_REF_SEQ = 4096


def attention_scale(seq_len: float, causal: bool) -> float:
    """Flash-attention efficiency at ``seq_len`` relative to the 2k-8k reference of op_efficiency.csv."""
    from gpuwise.estimate.op_inventory import attended_keys

    ctx, ref = attended_keys(seq_len, causal), attended_keys(ATTN_REF_SEQ, causal)
    return (ctx / (ctx + ATTN_CTX_HALF)) / (ref / (ref + ATTN_CTX_HALF))


@dataclass(frozen=True)
class Hardware:
    """What the roofline needs of a GPU and its cluster."""

    peak_flops: float          # dense tensor peak at the training precision (FLOP/s)
    vector_flops: float        # non-tensor FP32 peak (elementwise math)
    hbm_bytes_s: float
    intra_gbps: float          # per-GPU unidirectional GPU-GPU bandwidth in a node (GB/s)
    inter_node_gbps: float     # per-node NIC bandwidth (GB/s)
    gpus_per_node: int
    fp8_flops: float = 0.0     # dense fp8 tensor peak (FLOP/s; 0: none, FP8 GEMMs run at peak_flops)


def _rates(hw: Hardware) -> Hardware:
    """`hw` less its network (zeroed): what `row_times` reads, so `linear_rows` is computed once per GPU and
    precision, not once per node size and network too."""
    return Hardware(hw.peak_flops, hw.vector_flops, hw.hbm_bytes_s, 0.0, 0.0, 0, hw.fp8_flops)


def gemm_efficiency(eff: OpEfficiency, width):
    """Achieved share of the tensor peak of a GEMM whose smallest weight dimension is `width` (array or number)."""
    return eff.gemm * width / (width + eff.gemm_w0 + 1e-12)


def attention_efficiency(eff: OpEfficiency, seq_len: float, causal: bool) -> float:
    """Achieved share of the tensor peak of the flash-attention core at `seq_len` (fwd + bwd)."""
    return min(MAX_TENSOR_EFFICIENCY, eff.attention * attention_scale(seq_len, causal))


def row_times(work, hw: Hardware, eff: OpEfficiency) -> np.ndarray:
    """Seconds per row and phase (rows x 3) of one micro-step: roofline + launch overhead (reads only the
    compute and HBM rates of `hw`: see `_rates`)."""
    gemm_eff = gemm_efficiency(eff, work.gemm_width[:, None])
    rate = np.where(work.cls[:, None] == GEMM, hw.peak_flops * gemm_eff,
                    np.where(work.cls[:, None] == ATTN, hw.peak_flops * eff.attention, hw.vector_flops))
    t_flop = np.divide(work.flops, rate, out=np.zeros_like(work.flops), where=work.flops > 0)
    t_mem = work.bytes / (hw.hbm_bytes_s * eff.memory)
    return np.maximum(t_flop, t_mem) + work.kernels * eff.launch_s


def group_gbps(size: int, stride: int, hw: Hardware) -> float:
    """Per-GPU bandwidth of a ring over ``size`` ranks spaced ``stride`` apart (rank order tp, cp, dp, pp)."""
    if size <= 1:
        return hw.intra_gbps
    per_node = max(1, hw.gpus_per_node // stride) if stride < hw.gpus_per_node else 1
    if size <= per_node:
        return hw.intra_gbps
    return min(hw.intra_gbps, per_node * hw.inter_node_gbps / hw.gpus_per_node)


@dataclass
class RooflineStep:
    """Components of one optimizer step (seconds) on the busiest GPU."""

    compute_s: float           # all micro-steps' operator time (incl. recompute)
    tp_s: float
    cp_s: float
    pp_p2p_s: float
    bubble_s: float
    dp_s: float                # exposed data-parallel / FSDP communication
    optimizer_s: float
    by_class_s: dict[str, float]
    bound: dict[str, float]    # share of compute time in memory-bound rows, in launch overhead

    @property
    def step_s(self) -> float:
        return self.compute_s + self.tp_s + self.cp_s + self.pp_p2p_s + self.bubble_s + self.dp_s + self.optimizer_s


@lru_cache(maxsize=1024)
def _stage_params(model: ModelSpec, pp: int) -> float:
    from gpuwise.workload.models import param_counts

    pc = param_counts(model)
    body = pc.layer * pc.n_layers + pc.encoder_layer * pc.n_encoder_layers
    return body / pp + max(pc.embedding, pc.lm_head + pc.final)


@dataclass(frozen=True)
class LinearRows:
    """Per-row roofline terms of one micro-step, linear in the micro-batch b (the planner's inner loop):
    row time = max(b * flop_s, b * mem_s + mem0_s) + launch_s, already weighted by the row's count on the stage."""

    flop_s: np.ndarray
    mem_s: np.ndarray
    mem0_s: np.ndarray
    launch_s: np.ndarray
    cls: np.ndarray
    layers: float
    launch_total_s: float


@lru_cache(maxsize=4096)
def linear_rows(model: ModelSpec, seq_len: int, tp: int, cp: int, sp: bool, pp: int, vb: float, recompute: str,
                frozen: bool, flash: bool, hw: Hardware, eff: OpEfficiency, masked: bool = False) -> LinearRows:
    """Work at micro-batch 1 and 2 gives each row's per-sample and fixed (weight) parts exactly."""
    tab = op_table(model)
    w1, w2 = (micro_step_work(tab, b, seq_len, tp, cp, sp, pp, vb, recompute, frozen, flash, masked) for b in (1, 2))
    if flash:
        eff = replace(eff, attention=attention_efficiency(eff, seq_len, tab.causal and not masked))
    weight = np.where(tab.scope == 0, w1.layers, w1.head)[:, None]
    zero = np.zeros_like(w1.flops)
    flop_s = (row_times(replace_work(w1, w1.flops, zero, zero), hw, eff) * weight).ravel()
    mem1 = row_times(replace_work(w1, zero, w1.bytes, zero), hw, eff)
    mem2 = row_times(replace_work(w1, zero, w2.bytes, zero), hw, eff)
    return LinearRows(flop_s, ((mem2 - mem1) * weight).ravel(), ((2 * mem1 - mem2) * weight).ravel(),
                      (w1.kernels * weight).ravel() * eff.launch_s, np.repeat(tab.cls, 3), w1.layers,
                      float((w1.kernels * weight).sum()) * eff.launch_s)


def replace_work(work, flops, bytes_, kernels):
    """A copy of ``work`` with other FLOPs / bytes / kernels (to isolate one roofline term)."""
    return replace(work, flops=flops, bytes=bytes_, kernels=kernels)


@lru_cache(maxsize=65536)
def _operator_time(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int, sp: bool, pp: int, vb: float,
                   recompute: str, frozen: bool, flash: bool, hw: Hardware, eff: OpEfficiency,
                   masked: bool = False) -> tuple:
    """(operator seconds, per-class seconds, layers, launch seconds, forward share of the operator seconds) of one
    micro-step: independent of dp,
    ZeRO and grad_accum, so a search's thousands of step times share a few hundred of these (`hw`: its
    rates only, `_rates`, so every node size and network shares them too)."""
    lr = linear_rows(model, seq_len, tp, cp, sp, pp, vb, recompute, frozen, flash, hw, eff, masked)
    rows = np.maximum(micro_batch * lr.flop_s, micro_batch * lr.mem_s + lr.mem0_s) + lr.launch_s
    by_class = np.bincount(lr.cls, weights=rows, minlength=3)
    total = float(by_class.sum())
    forward = float(rows.reshape(-1, 3)[:, 0].sum())      # phases: forward, backward, recompute
    return total, tuple(float(x) for x in by_class), lr.layers, lr.launch_total_s, forward / max(total, 1e-30)


def _value_bytes(cfg: TrainingConfig) -> float:
    """Bytes per activation / communicated value."""
    return 4.0 if cfg.precision == "fp32" else 2.0


def _micro_operator_time(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency) -> tuple:
    """`_operator_time` of one micro-step of ``cfg``: the one place its arguments are derived from a config."""
    p = cfg.plan
    frozen = cfg.frozen_base
    return _operator_time(model, cfg.micro_batch, cfg.seq_len, p.tp, p.cp, p.sp and p.tp > 1, p.pp,
                          _value_bytes(cfg), cfg.recompute, frozen, cfg.flash_attention, _rates(hw), eff,
                          cfg.padding_mask and model.is_transformer)


def micro_step_compute_s(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency) -> float:
    """Operator time of one micro-step of ``cfg`` (``transformer_step``'s compute_s / grad_accum)."""
    return _kernel_levers(cfg, hw, _micro_operator_time(model, cfg, hw, eff))[0]


def _kernel_levers(cfg: TrainingConfig, hw: Hardware, op_time: tuple) -> tuple:
    """`_operator_time`'s result under torch.compile (memory-bound time fused) and FP8 GEMMs (torchao Float8 or
    TE fp8: the GEMM time at the fp8 peak plus the casts); the factors are levers.py's stated assumptions."""
    if not (cfg.compile or cfg.float8 or cfg.precision == "fp8"):
        return op_time
    from gpuwise.estimate.levers import COMPILE_MEM_FRACTION, FP8_CAST_FRACTION

    total, (gemm, attn, mem), layers, launch, fwd_share = op_time
    if cfg.compile:
        mem *= COMPILE_MEM_FRACTION
    if (cfg.float8 or cfg.precision == "fp8") and hw.fp8_flops > hw.peak_flops:
        gemm *= hw.peak_flops / hw.fp8_flops + FP8_CAST_FRACTION
    return gemm + attn + mem, (gemm, attn, mem), layers, launch, fwd_share


def lora_adapter_s(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency) -> float:
    """Seconds per micro-step of the unmerged LoRA adapters' ops on the busiest GPU (0 without adapters): rank r <<
    width, so their matmuls, casts, dropout, scaling and sums are bound by the bytes they move, counted on the layer
    code the stack runs (estimate.adapter_traffic: PEFT's float32 layers move several times a plain adapter's bytes),
    at the HBM rate; plus one launch per counted op."""
    if not cfg.frozen_base or cfg.lora_rank <= 0:
        return 0.0
    from gpuwise.estimate.adapter_traffic import counted_key

    p, key = cfg.plan, counted_key(cfg)
    per_token, fixed, kernels, rerun = _adapter_work(model, cfg.lora_targets, cfg.lora_rank, p.tp, p.pp, cfg.recompute,
                                                     key)
    tokens = cfg.micro_batch * cfg.seq_len / p.cp
    t = (tokens * per_token + fixed) / (hw.hbm_bytes_s * eff.memory) + kernels * eff.launch_s
    if key[-1] == "rerun":                  # the counted row's dora column (adapter_traffic.dora_kind)
        # PEFT's DoRA with dropout re-runs each adapted frozen matmul on the dropped input: in every forward and re-run
        # forward, and its input gradient once, GEMMs at the GEMM rate (their bytes are in the counted row)
        t += 2.0 * tokens * rerun / (hw.peak_flops * eff.gemm)
    return t


@lru_cache(maxsize=4096)      # a layout search varies dp, ZeRO and grad_accum, which the adapters' work ignores
def _adapter_work(model: ModelSpec, targets: str, rank: int, tp: int, pp: int, recompute: str,
                  key: tuple) -> tuple[float, float, float, float]:
    """(bytes per token, bytes whatever the tokens, kernels, adapted frozen weights x (forwards + 1 backward)) of one
    micro-step's adapters on the busiest GPU, counted row `key`: a stage holds 1/pp of the blocks, whose forwards run again under
    recompute (the re-run share); the output layer's adapter, if targeted, runs once, on the last stage."""
    from gpuwise.estimate.adapter_traffic import table
    from gpuwise.estimate.lora import adapter_shapes, head_adapter_shape

    t = table()[key]
    forwards = 1.0 + reforwarded_blocks(model.n_layers + model.n_encoder_layers, recompute)
    shapes = [(a, b, n / pp, forwards) for a, b, n in adapter_shapes(model, targets, tp)]
    head = head_adapter_shape(model, targets, tp)
    shapes += [(*head, 1, 1.0)] if head else []
    moved = sum(n * t.bytes_per_token(d_in, d_out, rank, fw) for d_in, d_out, n, fw in shapes)
    fixed = sum(n * t.fixed_bytes(d_in, d_out, rank, fw) for d_in, d_out, n, fw in shapes)
    weights = sum(n * (fw + 1) * d_in * d_out for d_in, d_out, n, fw in shapes)
    return moved, fixed, sum(n * (fw * t.fwd_kernels + t.bwd_kernels) for *_, n, fw in shapes), weights


# Share of HBM bandwidth bitsandbytes' NF4 dequantisation passes reach, on the bytes they move (nf4_dequant_s).
# FITTED on ms-swift's two bnb-nf4 rows (qwen-7b/14b-chat LoRA on a bitsandbytes 0.41.3 4-bit base, one A100-80GB,
# calibration/external_throughput.csv) by the rule in validation/stack_efficiency.fit_nf4_share: each row's measured
# time per micro-step less its own model's 16-bit LoRA row's (same data) is the dequantisation; 0.136 and 0.136.
# Out of sample: the Vertex OpenLLaMA-7B QLoRA / LoRA ratios (gpuwise validate throughput, ratio checks). Far below
# a copy kernel's ~0.85: both sources ran QLoRA ~1.8x slower than LoRA. Newer bitsandbytes may be faster (unmeasured).
NF4_DEQUANT_BW_SHARE = 0.136


def nf4_dequant_s(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency,
                  share: float = NF4_DEQUANT_BW_SHARE) -> float:
    """Seconds per micro-step of dequantising a 4-bit (NF4) frozen base (0 without one). bitsandbytes' MatMul4Bit
    dequantises each block weight to 16-bit before its GEMM: in the forward, again for the input gradient in the
    backward (no weight gradient: frozen), and in every re-run forward. Each pass reads the 4-bit codes and block
    constants and writes the 16-bit weight (memory-bound, one kernel), plus a 16-bit cast per extra copy the stack's
    code makes (model_code.csv nf4_dequant_copies); with many tokens every expert of a mixture is dequantised. The
    output layer where the stack quantises it too (nf4_output_layer)."""
    if cfg.quantize != "nf4":
        return 0.0
    from gpuwise.estimate.stack_code import model_code
    from gpuwise.workload.models import param_counts

    code, counts, p = model_code(cfg.stack), param_counts(model), cfg.plan
    total = model.n_layers + model.n_encoder_layers
    weights = total / p.pp * (counts.layer - counts.layer_replicated) / p.tp
    head = model.vocab_size * model.hidden / p.tp if code.nf4_output_layer else 0.0
    passes = 2.0 + reforwarded_blocks(total, cfg.recompute)
    per_weight = code.nf4_bytes + 2.0 + 4.0 * (code.nf4_dequant_copies - 1)   # read codes, write 16-bit; casts r+w
    kernels = (total / p.pp * passes * _linears_per_block(model) + 2.0 * bool(head)) * code.nf4_dequant_copies
    return (weights * passes + 2.0 * head) * per_weight / (hw.hbm_bytes_s * share) + kernels * eff.launch_s


def gptq_dequant_s(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency) -> float:
    """Seconds per micro-step of AutoGPTQ dequantising a GPTQ base (0 without one): each block matrix in every forward
    and re-run forward (the backward reuses the fp16 copy autograd kept), by its op sequence (estimate.gptq: bytes and
    kernels counted from the code), memory-bound at the HBM share every other elementwise op gets (eff.memory): not
    fitted on GPTQ runs."""
    from gpuwise.estimate.gptq import gptq_format
    from gpuwise.workload.models import param_counts

    fmt = gptq_format(cfg.quantize)
    if fmt is None or cfg.lora_rank <= 0:
        return 0.0
    counts, total = param_counts(model), model.n_layers + model.n_encoder_layers
    passes = 1.0 + reforwarded_blocks(total, cfg.recompute)
    weights = total * (counts.layer - counts.layer_replicated) * passes
    kernels = total * _linears_per_block(model) * passes * fmt.dequant_kernels
    return weights * fmt.dequant_moved_bytes / (hw.hbm_bytes_s * eff.memory) + kernels * eff.launch_s


def _linears_per_block(model: ModelSpec) -> int:
    """Weight matrices of one block: q, k, v, o and the MLP's (gated: 3) per expert."""
    return 4 + (3 if model.gated_mlp else 2) * max(1, model.n_experts)


def tp_overlap_possible(tp: int, hw: Hardware) -> bool:
    """AsyncTP (PyTorch SymmetricMemory micro-pipelining, Transformer Engine userbuffers) needs the TP group's
    peer-to-peer NVLink: the group must fit inside one node."""
    return 1 < tp <= max(hw.gpus_per_node, 1)


def tp_exposed_s(t_tp: float, gemm_s: float, tp: int, overlapped: bool) -> float:
    """Exposed seconds of a micro-step's TP collectives (``t_tp``). Without AsyncTP all of them (each all-gather /
    reduce-scatter sits between the GEMMs that consume / produce it). With it, each collective is cut into ``tp``
    chunks pipelined against the chunks of its GEMM: only the comm beyond the GEMM time, plus one chunk to fill the
    pipeline, stays exposed -- max(0, t_tp - gemm_s) + t_tp / tp (``gemm_s``: the micro-step's GEMM time)."""
    if not overlapped or t_tp <= 0:
        return t_tp
    return max(0.0, t_tp - gemm_s) + t_tp / tp


def _micro_costs(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency) -> tuple:
    """(operator time, TP, CP, PP p2p seconds, per-class seconds, launch share, forward share) of one micro-step on
    the busiest GPU."""
    p, vb = cfg.plan, _value_bytes(cfg)
    t_micro, by_class, layers, launch_s, fwd_share = _kernel_levers(cfg, hw, _micro_operator_time(model, cfg, hw, eff))
    t_lora = lora_adapter_s(model, cfg, hw, eff) + nf4_dequant_s(model, cfg, hw, eff) + gptq_dequant_s(model, cfg, hw,
                                                                                                         eff)
    t_micro, by_class = t_micro + t_lora, (by_class[GEMM], by_class[ATTN], by_class[MEM] + t_lora)
    tokens = cfg.micro_batch * cfg.seq_len / p.cp
    t_tp = 0.0
    if p.tp > 1:
        # re-run block forwards repeat their 4 forward transfers (full: every block; layer-K: every K-th)
        units = TP_TRANSFERS + 4 * reforwarded_blocks(model.n_layers + model.n_encoder_layers, cfg.recompute)
        t_tp = layers * units * comm.ring_gather_s(tokens * model.hidden * vb, p.tp, group_gbps(p.tp, 1, hw))
        t_tp = tp_exposed_s(t_tp, by_class[GEMM], p.tp, cfg.async_tp and tp_overlap_possible(p.tp, hw))
    t_cp = 0.0
    if p.cp > 1:
        kv = model.n_kv_heads * (model.head_dim or model.hidden // model.n_heads)
        chunk = tokens * 2 * kv * vb / p.tp
        ring = 3 * (p.cp - 1) * chunk / (group_gbps(p.cp, p.tp, hw) * 1e9 * comm.LINK_EFFICIENCY)
        attn_layer = float(by_class[ATTN]) / max(layers, 1e-9)
        t_cp = layers * max(0.0, ring - attn_layer)
    t_p2p = 0.0
    if p.pp > 1:
        act = tokens * model.hidden * vb / (p.tp if p.sp else 1)
        t_p2p = 2 * act / (group_gbps(p.pp, p.tp * p.cp * p.dp, hw) * 1e9 * comm.LINK_EFFICIENCY) + 2 * comm.HOP_LATENCY_S
    return (t_micro, t_tp, t_cp, t_p2p, (by_class[GEMM], by_class[ATTN], by_class[MEM]),
            launch_s / max(t_micro, 1e-30), fwd_share)


def _ring_latency(gbps: float, hw: Hardware) -> float:
    """Per-hop latency of a ring at ``gbps`` per GPU: NVLink/PCIe inside a node, the network across nodes."""
    return comm.HOP_LATENCY_S if gbps >= hw.intra_gbps else comm.NET_LATENCY_S


def overlap_windows(t_one: float, fwd_share: float) -> tuple[float, float]:
    """(forward, backward) seconds of one micro-step of ``t_one`` seconds (operators and the TP/CP/PP communication
    inside it), split by the forward share of its operator time; recompute's re-forward is part of backward."""
    return t_one * fwd_share, t_one * (1.0 - fwd_share)


def hybrid_zero_s(grad_bytes: float, n_dp: int, shard: int, tp: int, hw: Hardware, t_bwd: float) -> float:
    """Exposed DP time of hybrid ZeRO-1 (InternEvo HybridZeroOptimizer, InternLM/InternEvo @ fa7337b and c628a8c8):
    gradients all-reduced over all ``n_dp`` ranks in buckets hooked on the backward pass (overlapped as plain DP,
    with the last micro-step's backward of ``t_bwd`` seconds), then, after the optimizer step, each of the ``shard``
    ranks of a group broadcasts its updated parameter slice to the group (``broadcast_params``, waited before the
    next step: an all-gather's volume, exposed)."""
    all_bw, group_bw = group_gbps(n_dp, tp, hw), group_gbps(shard, tp, hw)
    reduce = 2 * comm.ring_gather_s(grad_bytes, n_dp, all_bw, _ring_latency(all_bw, hw))
    gather = comm.ring_gather_s(grad_bytes, shard, group_bw, _ring_latency(group_bw, hw))
    return dp_exposed_s(reduce, t_bwd) + gather


def fsdp_exposed_s(gather_s: float, reduce_scatter_s: float, t_fwd: float, t_bwd: float) -> float:
    """Exposed seconds per micro-step of ZeRO-3/FSDP: the forward parameter all-gather (``gather_s``) prefetched
    behind up to FSDP_OVERLAP of the forward, the backward all-gather and the gradient reduce-scatter behind up to
    FSDP_OVERLAP of the backward (each window hides only its own phase's collectives)."""
    return (max(0.0, gather_s - FSDP_OVERLAP * t_fwd)
            + max(0.0, gather_s + reduce_scatter_s - FSDP_OVERLAP * t_bwd))


def dp_exposed_s(allreduce_s: float, t_bwd: float) -> float:
    """Exposed seconds of the ZeRO-0/1/2 gradient reduction (all-reduce volume, ``allreduce_s``): bucketed by the
    gradient hooks, it overlaps up to DP_OVERLAP of the last micro-step's backward (``t_bwd``), not its forward."""
    return max(0.0, allreduce_s - DP_OVERLAP * t_bwd)


def transformer_step(model: ModelSpec, cfg: TrainingConfig, hw: Hardware, eff: OpEfficiency, trainable: float | None,
                     interleave: int = 1) -> RooflineStep:
    """Step time of ``cfg`` (plan = dp x tp x pp x cp, ZeRO stage, SP) for a transformer ``model``;
    ``trainable`` = trainable parameters (None: all, full training)."""
    p, vb = cfg.plan, _value_bytes(cfg)
    t_micro, t_tp, t_cp, t_p2p, by_class, launch, fwd_share = _micro_costs(model, cfg, hw, eff)
    m = cfg.grad_accum
    t_one = t_micro + t_tp + t_cp + t_p2p
    t_fwd, t_bwd = overlap_windows(t_one, fwd_share)
    bubble = (p.pp - 1) / max(1, interleave) * t_one if p.pp > 1 else 0.0

    local = (_stage_params(model, p.pp) if trainable is None else trainable / p.pp) / p.tp
    n_dp = p.dp * p.cp
    dp_bw = group_gbps(n_dp, p.tp, hw)
    lat = _ring_latency(dp_bw, hw)
    t_dp = 0.0
    if n_dp > 1 and local > 0:
        if p.zero >= 3:
            # forward and backward all-gather every weight of the stage -- frozen ones too (LoRA): ZeRO-3 shards
            # them, as the memory model counts; fp8 under Float8 where the GPU has fp8 tensor cores (torchao):
            # half the bytes -- and the reduce-scatter moves the trainable gradients only
            fp8_gather = cfg.float8 and hw.fp8_flops > hw.peak_flops
            weights = _stage_params(model, p.pp) / p.tp * (NF4_BYTES if cfg.quantize == "nf4" else vb)
            gather = (0.5 if fp8_gather else 1.0) * comm.ring_gather_s(max(weights, local * vb), n_dp, dp_bw, lat)
            t_dp = m * fsdp_exposed_s(gather, comm.ring_gather_s(local * vb, n_dp, dp_bw, lat), t_fwd, t_bwd)
        elif p.zero_shard:
            t_dp = hybrid_zero_s(local * vb, n_dp, p.zero_shard, p.tp, hw, t_bwd)
        else:
            t_dp = dp_exposed_s(2 * comm.ring_gather_s(local * vb, n_dp, dp_bw, lat), t_bwd)
    shard = p.state_shards if p.zero >= 1 else 1
    from gpuwise.estimate.levers import resolve

    step_bytes = optimizer_bytes(cfg.optimizer, resolve(cfg).optimizer_impl)
    t_opt = local / shard * step_bytes / (hw.hbm_bytes_s * eff.memory) + OPTIMIZER_KERNELS * eff.launch_s
    if cfg.cpu_offload or cfg.offload_optimizer:
        t_opt = 0.0            # the host steps (levers.offload_seconds)
    classes = dict(zip(("gemm", "attention", "memory"), (c * m for c in by_class)))
    return RooflineStep(t_micro * m, t_tp * m, t_cp * m, t_p2p * m, bubble, t_dp, t_opt, classes,
                        {"memory": classes["memory"] / max(t_micro * m, 1e-30), "launch": launch})
