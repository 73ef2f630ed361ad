"""Analytical step time of a training configuration on a GPU type, count and layout.

Transformers: per-operator roofline over the model's operator inventory plus TP/CP/PP/DP/FSDP
communication (``roofline_step.py``, ``op_inventory.py``; efficiencies per GPU architecture fitted
on public measurements). Explicit (non-transformer) models keep the constant-efficiency form below:

    micro-step compute  = t0 + max(hardware FLOPs per GPU / (e_max * peak), memory traffic / HBM bandwidth)
                          (efficiency.py; traffic = calibrated bytes per sample, efficiency.memory_traffic_bytes)
    pipeline            = (m + pp - 1) micro-steps per stage (bubble (pp-1)/(m+pp-1))
    data parallel       = gradient all-reduce (ZeRO: reduce-scatter + all-gather; ZeRO-3 x1.5),
                          overlapped with the backward pass of the last micro-step (DDP buckets)
    optimizer update    = memory-bound: ~16 bytes read+written per local parameter at HBM speed
    step                = pipeline compute + exposed DP sync + optimizer update

Outputs step time, samples and tokens per second (total and per GPU) and MFU = model FLOPs (no
recompute) / (step time x GPUs x dense peak).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from gpuwise.errors import InputError
from gpuwise.estimate import comm
from gpuwise.estimate.efficiency import compute_unit, efficiency_for, memory_traffic_bytes, roofline
from gpuwise.estimate.flops import step_flops
from gpuwise.estimate.gptq import gptq_format, gptq_note
from gpuwise.estimate.lora import adapter_params
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

DP_OVERLAP = 0.8            # fraction of the last backward pass that can hide the gradient all-reduce
OPTIMIZER_BYTES_PER_PARAM = 16.0   # Adam: read fp32 param+grad+m+v, write param+m+v (~4x4 bytes)


def default_inter_node_gbps(gpu: GpuSpec) -> tuple[float, str]:
    """NIC bandwidth per node (GB/s) when the instance does not say: by GPU class, stated in assumptions."""
    arch = gpu.architecture.split()[0]
    if gpu.form_factor.startswith(("SXM", "OAM")) and arch in ("Hopper", "Blackwell"):
        return 400.0, "400 GB/s (3200 Gb/s) per node (p5 / a3-mega class EFA/RDMA)"
    if gpu.form_factor.startswith(("SXM", "OAM")) and arch in ("Ampere", "CDNA2", "CDNA3"):
        return 50.0, "50 GB/s (400 Gb/s) per node (p4d class)"
    return 12.5, "12.5 GB/s (100 Gb/s) per node (generic cloud VM network)"


@dataclass
class StepTimeEstimate:
    step_time_s: float
    compute_s: float            # compute incl. TP communication and recompute, excl. bubble
    comm_s: float               # exposed DP sync + TP communication
    bubble_s: float             # pipeline idle time
    optimizer_s: float
    mfu: float
    samples_per_s: float
    tokens_per_s: float
    gpus: int
    nodes: int
    sample_unit: str            # "token" models report tokens too
    flops_efficiency: float     # achieved/peak of the compute part (hardware FLOPs)
    assumptions: list[str] = field(default_factory=list)
    host_s: float | None = None  # the host's time to dispatch the step's eager ops (estimate.host_ops; None: not modelled)

    @property
    def host_bound(self) -> bool:
        """The host's dispatch of the step's eager ops is the step time (estimate.host_ops)."""
        return self.host_s is not None and self.host_s >= self.step_time_s

    @property
    def samples_per_s_per_gpu(self) -> float:
        return self.samples_per_s / self.gpus

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus


def _bytes_per_value(precision: str) -> int:
    return 4 if precision == "fp32" else 2


# ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241): splitting each backward into its input
# and weight gradients fills about two thirds of 1F1B's bubble at 1F1B's activation memory: timed as a third of it
ZB_H1_BUBBLE_DIVISOR = 3


def schedule_interleave(schedule: str) -> int:
    """The bubble divisor v of a pipeline schedule (bubble = (pp - 1) / v micro-steps): interleaved-V's V chunks
    per stage, ZB-H1's third of 1F1B's bubble, 1 for 1F1B and GPipe (the same bubble, GPipe keeps more memory)."""
    if schedule.startswith("interleaved-"):
        return int(schedule.split("-", 1)[1])
    return ZB_H1_BUBBLE_DIVISOR if schedule in ("zb", "zb-h1") else 1


def analytical_step_time(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, gpus_per_node: int = 8,
                         nodes: int | None = None, inter_node_gbps: float | None = None,
                         pipeline_interleave: int | None = None, efficiency=None) -> StepTimeEstimate:
    """Analytical step time of ``cfg`` (its ParallelPlan gives dp/tp/pp/zero) on ``gpu``.

    ``gpus_per_node`` GPUs per instance; ``nodes`` defaults to the fewest that hold the plan;
    ``inter_node_gbps`` is the node's NIC bandwidth in GB/s (default by GPU class, stated);
    ``pipeline_interleave`` = virtual stages per GPU (Megatron interleaved 1F1B);
    ``efficiency`` = transformer per-op efficiencies (``roofline_step.OpEfficiency``; default: the fitted
    row of the GPU's architecture).
    """
    plan = cfg.plan
    gpus = plan.gpus
    if gpus < 1:
        raise InputError("gpus", gpus, "must be >= 1")
    if gpus_per_node < 1:
        raise InputError("gpus_per_node", gpus_per_node, "must be >= 1")
    nodes = nodes or max(1, math.ceil(gpus / gpus_per_node))
    per_node = math.ceil(gpus / nodes)
    assumptions: list[str] = []
    if inter_node_gbps is None:
        inter_node_gbps, why = default_inter_node_gbps(gpu)
        if nodes > 1:
            assumptions.append(f"inter-node bandwidth {why} (default; pass inter_node_gbps to change)")
    else:
        assumptions.append(f"inter-node bandwidth {inter_node_gbps:g} GB/s ({inter_node_gbps * 8:g} Gb/s) per node (given)")

    fl = step_flops(model, cfg)
    unit, peak = compute_unit(gpu, cfg.precision)
    if pipeline_interleave is None:        # the plan's schedule (interleaved-V, zb); callers may give v instead
        pipeline_interleave = schedule_interleave(plan.pp_schedule)
    if model.is_transformer:
        return _transformer_estimate(model, cfg, gpu, gpus_per_node, nodes, inter_node_gbps, pipeline_interleave,
                                     fl, peak, assumptions, efficiency)
    return _explicit_estimate(model, cfg, gpu, nodes, per_node, inter_node_gbps, pipeline_interleave, fl, unit,
                              peak, assumptions)


def _explicit_micro_step(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, fl, unit: str, peak: float,
                         assumptions: list[str]) -> tuple[float, float]:
    """(seconds, hardware FLOPs) of one micro-step on one GPU of an explicit (non-transformer) model:
    the architecture's calibrated efficiency, or HBM bandwidth where elementwise layers bind."""
    plan = cfg.plan
    eff = efficiency_for(gpu, unit)
    assumptions.append(eff.describe())
    # hardware FLOPs of one micro-step on one GPU (work split over tp*pp; dp replicas in parallel)
    micro_flops = fl.hardware_flops / (plan.dp * cfg.grad_accum) / (plan.tp * plan.pp)
    t_flops = micro_flops / (eff.e_max * peak)
    t_micro = eff.t0_s + t_flops
    traffic = memory_traffic_bytes(model, cfg.precision)
    if traffic is not None:
        # roofline: elementwise layers (BN, ReLU, pooling) of CNN-class models are bound by HBM bandwidth,
        # not by the GEMM efficiency calibrated on transformer matmuls
        t_mem = cfg.micro_batch * traffic * (2.0 if cfg.recompute == "full" else 1.0) / (gpu.hbm_gbps * 1e9)
        t_micro = eff.t0_s + max(t_flops, t_mem)
        assumptions.append(roofline().describe() + f"; here {'memory' if t_mem > t_flops else 'compute'}-bound "
                           f"({traffic / 1e6:.0f} MB per sample at {gpu.hbm_gbps:.0f} GB/s)")
    return t_micro, micro_flops


def _explicit_estimate(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, nodes: int, per_node: int,
                       inter_node_gbps: float, pipeline_interleave: int, fl, unit: str, peak: float,
                       assumptions: list[str]) -> StepTimeEstimate:
    """Step time of an explicit (non-transformer) model: micro-steps through the pipeline, the exposed
    DP gradient sync and a memory-bound optimizer update."""
    from gpuwise.workload.models import param_count

    plan = cfg.plan
    gpus = plan.gpus
    intra = gpu.intra_node_gbps
    t_micro, micro_flops = _explicit_micro_step(model, cfg, gpu, fl, unit, peak, assumptions)
    micro_batches = cfg.grad_accum

    t_tp = 0.0                  # explicit models: no tensor parallelism modelled
    t_stage = t_micro
    bubble = comm.pipeline_bubble_fraction(plan.pp, micro_batches, pipeline_interleave)
    t_pipe = t_stage * micro_batches / (1.0 - bubble) if plan.pp > 1 else t_stage * micro_batches
    bubble_s = t_pipe - t_stage * micro_batches
    if plan.pp > 1:
        assumptions.append(f"pipeline bubble (pp-1)/(m+pp-1) = {bubble:.1%} with m={micro_batches} micro-batches")

    # data parallel gradient sync
    params = param_count(model)
    trainable = params
    local_params = trainable / (plan.tp * plan.pp)
    grad_bytes = local_params * _bytes_per_value(cfg.precision)
    dp_per_node = max(1, per_node // (plan.tp * plan.pp)) if plan.tp * plan.pp <= per_node else 1
    t_dp = comm.dp_sync_s(grad_bytes, plan.dp, dp_per_node, intra, inter_node_gbps, plan.zero)
    overlap = DP_OVERLAP * (2.0 / 3.0) * t_micro if t_dp > 0 else 0.0
    exposed_dp = max(0.0, t_dp - overlap)
    if plan.dp > 1:
        assumptions.append(f"DP gradient sync overlapped with up to {DP_OVERLAP:.0%} of the last backward pass; "
                           f"ring collectives at {comm.LINK_EFFICIENCY:.0%} of link bandwidth")

    # optimizer update: memory-bound over the locally owned parameters
    shard = plan.dp if plan.zero >= 1 else 1
    t_opt = local_params / shard * OPTIMIZER_BYTES_PER_PARAM / (gpu.hbm_gbps * 1e9 * 0.7)

    step = t_pipe + exposed_dp + t_opt
    mfu = fl.model_flops / (step * gpus * peak)
    token = model.sample_unit == "token"
    samples_s = fl.samples / step
    return StepTimeEstimate(
        step_time_s=step, compute_s=t_stage * micro_batches - t_tp * micro_batches, comm_s=exposed_dp + t_tp * micro_batches,
        bubble_s=bubble_s, optimizer_s=t_opt, mfu=mfu, samples_per_s=samples_s,
        tokens_per_s=fl.tokens / step if token else samples_s, gpus=gpus, nodes=nodes,
        sample_unit=model.sample_unit, flops_efficiency=micro_flops / (t_micro * peak), assumptions=assumptions)


def _transformer_estimate(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, gpus_per_node: int, nodes: int,
                          inter_node_gbps: float, interleave: int, fl, peak: float,
                          assumptions: list[str], efficiency=None) -> StepTimeEstimate:
    """Per-operator roofline path (transformers)."""
    from gpuwise.estimate.roofline_step import op_efficiency_for, transformer_step
    from gpuwise.workload.models import param_count

    plan = cfg.plan
    hw = roofline_hardware(gpu, peak, gpus_per_node, inter_node_gbps)
    eff = efficiency or op_efficiency_for(gpu, cfg.stack)
    trainable = None
    if cfg.frozen_base:
        trainable = max(1, adapter_params(model, max(cfg.lora_rank, 1), cfg.lora_targets, cfg.dora))
        from gpuwise.estimate.adapter_traffic import traffic_note
        from gpuwise.estimate.roofline_step import lora_adapter_s

        t = lora_adapter_s(model, cfg, hw, eff) * cfg.grad_accum
        assumptions.append(f"LoRA: {trainable:,} adapter parameters ({trainable / param_count(model):.3%} of the weights) "
                           f"are updated and synchronised; frozen GEMMs skip their weight gradient; "
                           f"{traffic_note(cfg)}: {t * 1e3:.3g} ms per step")
    r = transformer_step(model, cfg, hw, eff, trainable, interleave)
    assumptions.append(eff.text)
    if cfg.quantize == "nf4":
        from gpuwise.estimate.roofline_step import nf4_dequant_s

        t = nf4_dequant_s(model, cfg, hw, eff) * cfg.grad_accum
        assumptions.append(f"NF4 base: every block weight dequantised to 16-bit before its GEMM in the forward, the "
                           f"backward and each re-run forward (memory-bound, one kernel per weight and pass, at the "
                           f"bandwidth share fitted on bitsandbytes 0.41.3's MatMul4Bit, also for the {cfg.stack} "
                           f"stack's own kernels): {t * 1e3:.3g} ms per step; the GEMMs then run at the 16-bit rates")
    if gptq_format(cfg.quantize) is not None:
        from gpuwise.estimate.roofline_step import gptq_dequant_s

        t = gptq_dequant_s(model, cfg, hw, eff) * cfg.grad_accum
        fmt = gptq_format(cfg.quantize)
        assumptions.append(f"{gptq_note(cfg.quantize)}; the dequantisation ({fmt.dequant_moved_bytes:g} B moved per "
                           f"weight, {fmt.dequant_kernels} kernels per matrix) runs in every forward and re-run "
                           f"forward at the elementwise HBM share, not fitted on GPTQ runs: {t * 1e3:.3g} ms per step "
                           "(likely optimistic: ms-swift's A100 runs added 1.6-2.1x the time this predicts, "
                           "docs/validation.md); the GEMMs then run at the fp16 rates")
    if cfg.flash_attention:
        from gpuwise.estimate.op_inventory import CAUSAL_TILE
        from gpuwise.estimate.roofline_step import ATTN_CTX_HALF, attention_scale

        from gpuwise.estimate.op_inventory import op_table

        causal = op_table(model).causal and not cfg.padding_mask
        assumptions.append(f"flash attention at {cfg.seq_len:,} tokens: {attention_scale(cfg.seq_len, causal):.2f}x "
                           f"the 2k-8k rate above (efficiency ~ keys/(keys + {ATTN_CTX_HALF:g}) per query tile, assumed)"
                           + (f"; a causal mask computes the {CAUSAL_TILE}-key tiles on and below the diagonal, "
                              f"(seq + {CAUSAL_TILE}) / 2 keys per query" if causal else ""))
    if cfg.padding_mask:
        assumptions.append(f"padding mask: the attention gets a {cfg.micro_batch} x {cfg.seq_len:,} x {cfg.seq_len:,} "
                           "additive mask (Hugging Face sdpa with an attention_mask holding zeros), "
                           + ("so PyTorch's memory-efficient kernel computes every key tile (no causal skip) and reads "
                              "the mask once per head, timed at the flash kernel's rate (its own rate is not measured "
                              "here; under autocast each layer's 16-bit cast of a float32 mask is not timed)"
                              if cfg.flash_attention else "read once per head as eager attention adds it to "
                              "its scores"))
    if model.sliding_window and cfg.seq_len > model.sliding_window:
        assumptions.append(f"sliding-window layers (window {model.sliding_window:,}) timed as full causal attention: "
                           "an over-estimate of their attention time at this length")
    if model.attn_softcap and not cfg.flash_attention:
        assumptions.append("attention soft-capping's tanh over the s x s scores is not timed (eager attention)")
    if cfg.compile or cfg.float8 or cfg.async_tp or cfg.precision == "fp8":
        from gpuwise.estimate.levers import kernel_note

        assumptions.append("step time: " + kernel_note(cfg))
        if (cfg.float8 or cfg.precision == "fp8") and not gpu.fp8_tflops:
            assumptions.append(f"{gpu.name} has no fp8 tensor cores (FP8 training needs compute capability 8.9+): "
                               "timed as bf16")
    if plan.gpus == 1:
        assumptions.append("one GPU: no communication")
    else:
        assumptions.append(_tp_note(cfg, gpus_per_node) + "context-parallel "
                           "K/V ring overlapped with attention; DP gradient sync overlapped with up to 80% of the last "
                           "micro-step's backward (recompute included), not its forward (FSDP: each micro-step's forward "
                           "all-gather with 80% of its forward, backward all-gather + reduce-scatter with 80% of its "
                           "backward); ring collectives at "
                           f"{comm.LINK_EFFICIENCY:.0%} of link bandwidth")
    if plan.zero_shard:
        assumptions.append(f"hybrid ZeRO-1 (InternEvo zero1 = {plan.zero_shard}): gradients all-reduced over "
                           f"dp x cp = {plan.dp * plan.cp} (overlapped as above), then the updated parameters "
                           f"all-gathered within groups of {plan.zero_shard} after the optimizer step (exposed)")
    if plan.pp > 1:
        assumptions.append(f"pipeline bubble (pp-1)/v = {(plan.pp - 1) / max(1, interleave):g} micro-steps "
                           f"(schedule {plan.pp_schedule}, v={interleave}"
                           + (": ZB-H1 fills two thirds of 1F1B's bubble" if plan.pp_schedule == "zb" else "")
                           + f") with m={cfg.grad_accum} micro-batches")
    step = r.step_s + _offload_s(model, cfg, gpu, trainable, r, assumptions)
    host = _host_floor(model, cfg, step, assumptions)
    step = max(step, host or 0.0)
    token = model.sample_unit == "token"
    samples_s = fl.samples / step
    comm_s = r.tp_s + r.cp_s + r.pp_p2p_s + r.dp_s
    return StepTimeEstimate(
        step_time_s=step, compute_s=r.compute_s, comm_s=comm_s, bubble_s=r.bubble_s, optimizer_s=r.optimizer_s,
        mfu=fl.model_flops / (step * plan.gpus * peak), samples_per_s=samples_s,
        tokens_per_s=fl.tokens / step if token else samples_s, gpus=plan.gpus, nodes=nodes,
        sample_unit=model.sample_unit, flops_efficiency=fl.hardware_flops / plan.gpus / (r.compute_s * peak),
        assumptions=assumptions, host_s=host)


def _tp_note(cfg: TrainingConfig, gpus_per_node: int) -> str:
    """How the step time treats the tensor-parallel collectives (roofline_step.tp_exposed_s)."""
    tp = cfg.plan.tp
    if tp <= 1:
        return "no tensor parallelism; "
    head = "tensor-parallel transfers (8 per layer, activation-sized) "
    if not cfg.async_tp:
        return head + "exposed (no AsyncTP: each collective sits between the GEMMs around it); "
    if tp > gpus_per_node:
        return head + f"exposed: AsyncTP needs the TP group inside one node (tp {tp} > {gpus_per_node} GPUs per node); "
    return head + f"chunked by AsyncTP against their GEMMs: exposed = comm beyond the GEMM time + 1/{tp} of it; "


def _offload_s(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, trainable: float | None, r,
               assumptions: list[str]) -> float:
    """Exposed seconds of CPU / activation offload per step (gpuwise.estimate.levers.offload_seconds)."""
    from gpuwise.estimate.levers import activation_offload, offload_seconds

    act_off = activation_offload(cfg)
    if not (cfg.cpu_offload or act_off or cfg.offload_optimizer):
        return 0.0
    from gpuwise.estimate.memory import saved_activation_bytes
    from gpuwise.workload.models import param_count

    p = cfg.plan
    local = (trainable or param_count(model)) / (p.tp * p.pp)
    saved = saved_activation_bytes(model, cfg) if act_off else 0.0
    extra, text = offload_seconds(cfg, gpu, local, saved, r.compute_s / cfg.grad_accum)
    assumptions.append(text)
    return extra


def _host_floor(model: ModelSpec, cfg: TrainingConfig, gpu_step: float, assumptions: list[str]) -> float | None:
    """Seconds the host needs to dispatch the step's eager ops (estimate.host_ops; None where not modelled, said);
    the step takes the larger of this and the GPU's time. Its notes carry no per-configuration numbers (searches
    merge them; "host-bound" is per configuration and is not merged): the floor itself is StepTimeEstimate.host_s."""
    from gpuwise.estimate.host_ops import FIT_NOTE, HOST_S_PER_OP, count_step
    from gpuwise.workload.stacks import stack_row

    if cfg.compile or stack_row(cfg.stack).host == "none":
        why = "torch.compile (compiled blocks dispatch few ops)" if cfg.compile else f"stack {cfg.stack}'s own kernels"
        assumptions.append(f"host floor: not applied under {why}")
        return None
    got = count_step(model, cfg)
    if got is None:
        assumptions.append(f"host floor: no op count for family {model.family} (the step is the GPU's time alone)")
        return None
    host = got.ops * HOST_S_PER_OP
    whose = "transformers'" if got.code == "transformers" else f"{got.code}'s"
    assumptions.append(f"host floor: a step takes at least its eager aten ops (counted on {whose} PyTorch model of the "
                       f"family at this precision, estimate/host_ops.py) x {FIT_NOTE}; host_s in --json")
    if got.notes:      # this configuration's (a search does not merge them: another variant may be chosen)
        assumptions.append("host-op count of this configuration: " + "; ".join(got.notes))
    if host > gpu_step:
        assumptions.append("host-bound: the host dispatches this step's ops more slowly than the GPU runs them "
                           "(step time = host_s)")
    return host


def roofline_hardware(gpu: GpuSpec, peak: float, gpus_per_node: int, inter_node_gbps: float):
    """The roofline's rates (roofline_step.Hardware) of ``gpu`` at tensor peak ``peak`` FLOP/s on this node/network."""
    from gpuwise.estimate.roofline_step import Hardware

    return Hardware(peak, gpu.fp32_tflops * 1e12, gpu.hbm_gbps * 1e9, gpu.intra_node_gbps, inter_node_gbps,
                    gpus_per_node, (gpu.fp8_tflops or 0.0) * 1e12)


def step_time_lower_bound(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, memo: dict | None = None) -> float:
    """Seconds that ``analytical_step_time(...).step_time_s`` (default efficiencies) is at least, at a
    fraction of its cost: a transformer's step is its operator time (grad_accum x the micro-step's,
    ``roofline_step.micro_step_compute_s``, memoised without dp, ZeRO and grad_accum) plus TP, CP, PP,
    bubble, DP and optimizer seconds that are never negative, summed after it (so the rounded sum is
    not below it either). 0 for explicit models (no bound). Searches skip configurations whose bound
    cannot beat their best so far. The operator time reads the GPU's rates only, not its node or network.
    ``memo``: a dict the caller keeps for this model and GPU only, holding the micro-step's time by
    `micro_step_key` (a search's thousands of bounds share a few hundred). With pipeline stages the bound adds
    the bubble of that operator time, (pp - 1) / v micro-steps (roofline_step.transformer_step's bubble is the
    same factor times a micro-step that includes its operator time, and the terms before it are not negative,
    so the rounded step is not below the rounded bound either)."""
    if not model.is_transformer:
        return 0.0
    if memo is None:
        micro = _micro_step_bound(model, cfg, gpu)
    else:
        key = micro_step_key(cfg)
        micro = memo.get(key)
        if micro is None:
            micro = memo[key] = _micro_step_bound(model, cfg, gpu)
    p = cfg.plan
    if p.pp > 1:
        return cfg.grad_accum * micro + (p.pp - 1) / max(1, schedule_interleave(p.pp_schedule)) * micro
    return cfg.grad_accum * micro


def micro_step_key(cfg: TrainingConfig) -> tuple:
    """Every field of ``cfg`` that `_micro_step_bound` reads (roofline_step.micro_step_compute_s: the operator
    rows, the kernel levers and the efficiencies; `_bound_rates`): not dp, ZeRO, grad_accum or offloading.
    tests/test_plan_candidates.py checks the bound does not change with any other field."""
    p = cfg.plan
    return (cfg.micro_batch, cfg.seq_len, p.tp, p.cp, p.sp, p.pp, cfg.precision, cfg.recompute, cfg.lora_rank,
            cfg.quantize, cfg.flash_attention, cfg.compile, cfg.float8, cfg.stack, cfg.padding_mask, cfg.dora)


def _micro_step_bound(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec) -> float:
    """The operator time of one micro-step of ``cfg`` on ``gpu`` (a transformer's)."""
    from gpuwise.estimate.roofline_step import micro_step_compute_s

    hw, eff = _bound_rates(gpu, cfg.precision, cfg.stack)
    return micro_step_compute_s(model, cfg, hw, eff)


@lru_cache(maxsize=1024)
def _bound_rates(gpu: GpuSpec, precision: str, stack: str):
    """(Hardware with no node or network, OpEfficiency) as `analytical_step_time` derives them (memoised:
    the bound's hot path)."""
    from gpuwise.estimate.roofline_step import op_efficiency_for

    return roofline_hardware(gpu, compute_unit(gpu, precision)[1], 0, 0.0), op_efficiency_for(gpu, stack)
