"""trace_memory: one rank's traced peak, with per-layer extrapolation for speed, and the parts that
are derived rather than traced (ZeRO-1/2 sharding, optimizer offload) stated in `method`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from gpuwise.errors import InputError
from gpuwise.trace.run import CATEGORIES, StageRun, trace_phases, trace_stage
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig, recompute_policy

PP_SCHEDULES = ("1f1b", "zb-h1")


@dataclass(frozen=True)
class TraceResult:
    """Peak bytes of the most loaded rank, by category (they sum to peak_allocated_bytes)."""

    param_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    temporary_bytes: float
    other_bytes: float
    peak_allocated_bytes: float
    method: str                      # full | extrapolated:<d1>,<d2> layers, plus ;emulated:<what>
    trace_s: float                   # wall seconds
    cpu_s: float                     # process CPU seconds
    peak_stage: str = "only"         # pipeline: first | last
    assumptions: tuple[str, ...] = field(default=())

    def breakdown(self) -> dict[str, float]:
        return {c: getattr(self, f"{c}_bytes") for c in CATEGORIES}


def _depths(n: int, cfg: TrainingConfig) -> tuple[int, int] | None:
    """First depth and depth step to trace for extrapolation (None: trace all n layers)."""
    pol = recompute_policy(cfg.recompute)
    step = pol.every if pol.kind == "layer" else 1
    d1 = -(-max(step, 2) // step) * step
    return None if n <= d1 + 2 * step else (d1, step)


# Two consecutive per-layer slopes must agree within this share (or 4 KiB) before we extrapolate:
# FSDP's all-gather buffers in flight, for one, only reach their steady count at three layers.
_SLOPE_TOL = 1e-3


def _stage(spec, cfg, run: StageRun, extrapolate: bool, foreach: bool) -> tuple[dict[str, float], str]:
    d = _depths(run.layers, cfg) if extrapolate else None
    if d is None:
        return {k: float(v) for k, v in trace_stage(spec, cfg, run, foreach=foreach).items()}, "full"
    d1, step = d
    seen: dict[int, list[dict[str, int]]] = {}

    def at(depth: int) -> list[dict[str, int]]:
        if depth not in seen:
            got = trace_phases(spec, cfg, StageRun(depth, run.embed, run.head, run.in_flight, run.first_layer),
                               foreach=foreach)
            seen[depth] = [cats for _, cats in got]
        return seen[depth]

    while d1 + 2 * step < run.layers:    # three depths, until every phase's per-layer slope is steady
        a, b, c = at(d1), at(d1 + step), at(d1 + 2 * step)
        if len(a) == len(b) == len(c) and all(_steady(x, y, z) for x, y, z in zip(a, b, c)):
            scale = (run.layers - d1 - step) / step
            outs = [{k: y[k] + (z[k] - y[k]) * scale for k in y} for y, z in zip(b, c)]
            out = max(outs, key=lambda o: o["peak"])     # the phase that peaks at the full depth
            if min(out.values()) >= 0:
                return out, f"extrapolated:{d1 + step},{d1 + 2 * step} layers"
            break                        # a category shrinks with depth: trace it all
        d1 += step
    return _stage(spec, cfg, run, False, foreach)


def _steady(a: dict[str, int], b: dict[str, int], c: dict[str, int]) -> bool:
    s1, s2 = b["peak"] - a["peak"], c["peak"] - b["peak"]
    return abs(s2 - s1) <= max(4096, _SLOPE_TOL * abs(s2))


def _stages(spec: ModelSpec, cfg: TrainingConfig, schedule: str) -> list[tuple[str, StageRun]]:
    p = cfg.plan
    if p.pp == 1:
        return [("only", StageRun(spec.n_layers))]
    if spec.family in ("t5", "bert", "roberta"):
        raise InputError("pp", p.pp, f"the trace pipelines decoder-only models; {spec.name} is {spec.family}: "
                         "use --method analytic or pp=1")
    base = spec.n_layers // p.pp
    last = spec.n_layers - (p.pp - 1) * base
    in_flight = min(p.pp, cfg.grad_accum)
    return [("first", StageRun(base, True, False, in_flight)),
            ("last", StageRun(last, False, True, 1, (p.pp - 1) * base))]


def _check(spec: ModelSpec, cfg: TrainingConfig, schedule: str) -> None:
    from gpuwise.estimate.memory import check_config
    from gpuwise.nn.traits import traits

    traits(spec)
    recompute_policy(cfg.recompute)
    _untraced(spec, cfg)
    check_config(spec, replace(cfg, recompute="none"))     # the other fields, as the analytic path checks them
    p = cfg.plan
    if schedule not in PP_SCHEDULES:
        raise InputError("pp-schedule", schedule, "use one of " + ", ".join(PP_SCHEDULES))
    if p.sp and p.tp > 1 and cfg.seq_len // p.cp % p.tp:
        raise InputError("sp", p.sp, f"sequence parallelism needs tp={p.tp} to divide the {cfg.seq_len // p.cp} "
                         "tokens per rank")


def trace_refusal(spec: ModelSpec, cfg: TrainingConfig, schedule: str = "1f1b") -> str:
    """Why `trace_memory` refuses `cfg` ('' when it runs it): the fix its InputError names."""
    try:
        _check(spec, cfg, schedule)
    except InputError as e:
        return e.fix
    return ""


def _untraced(spec: ModelSpec, cfg: TrainingConfig) -> None:
    """InputError for levers the trace does not run (the analytic method models them: gpuwise.estimate.levers)."""
    from gpuwise.estimate.levers import resolve
    from gpuwise.estimate.memory import fused_lora_mlp
    from gpuwise.estimate.stack_code import model_code

    lev = resolve(cfg)
    what = [name for name, on in (
        ("--cpu-offload", cfg.cpu_offload),
        ("--optimizer-in-backward with FSDP", cfg.optimizer_in_backward and cfg.plan.zero == 3),
        ("--activation-offload", cfg.activation_offload),
        (f"stack {cfg.stack}'s checkpoints offloaded to the host", lev.offload_checkpoints),
        (f"stack {cfg.stack}'s fused LoRA MLP (gate and up kept)", cfg.lora_rank > 0 and fused_lora_mlp(spec, model_code(cfg.stack), cfg.lora_targets)),
        (f"loss kernel {lev.loss_kernel}", lev.loss_kernel not in ("eager", "eager-nocast", "chunked")),
        (f"a {lev.loss_kernel} loss for {spec.family}", lev.loss_kernel in ("chunked", "eager-nocast")
         and spec.family in ("t5", "bert", "roberta")),
        (f"--optimizer {cfg.optimizer}", lev.paged), ("--compile", cfg.compile), ("--float8", cfg.float8),
        ("--precision fp8", cfg.precision == "fp8"), (f"stack {cfg.stack}'s gradient buffer / norms",
                                                      lev.fp32_main_grad or lev.low_norms)) if on]
    if what:
        raise InputError("method", "trace", "the trace does not model " + ", ".join(what)
                         + "; use --method analytic (gpuwise.estimate.levers models it)")


def trace_memory(spec: ModelSpec, cfg: TrainingConfig, *, extrapolate: bool = True, pp_schedule: str = "1f1b",
                 foreach: bool = False) -> TraceResult:
    """Traced per-GPU peak of one training step of `spec` under `cfg` (most loaded rank), of the model as the run's
    stack builds it (estimate.memory.stack_model: the run's position table; LitGPT's own output matrix)."""
    from gpuwise.estimate.memory import stack_model

    spec = stack_model(spec, cfg)
    _check(spec, cfg, pp_schedule)
    from gpuwise.estimate.levers import resolve

    foreach = foreach or resolve(cfg).optimizer_impl == "foreach"      # the stack's optimizer implementation
    p = cfg.plan
    t0, c0 = time.perf_counter(), time.process_time()
    zero = p.zero if p.zero < 3 else 0
    run_cfg = cfg if p.zero == 3 or p.zero == 0 else _deepspeed_run(cfg)
    best, method, stage_name = None, "full", "only"
    for name, run in _stages(spec, run_cfg, pp_schedule):
        got, how = _stage(spec, run_cfg, run, extrapolate, foreach)
        if best is None or got["peak"] > best["peak"]:
            best, method, stage_name = got, how, name
    emulated = _emulate(best, cfg, zero)
    notes = _notes(spec, cfg, pp_schedule, stage_name)
    if emulated:
        method += ";emulated:" + ",".join(emulated)
    return TraceResult(*(best[c] for c in CATEGORIES), best["peak"], method, time.perf_counter() - t0,
                       time.process_time() - c0, stage_name, tuple(notes))


def _with_zero(cfg: TrainingConfig, zero: int) -> TrainingConfig:
    return replace(cfg, plan=replace(cfg.plan, zero=zero))


def _ds_mixed(cfg: TrainingConfig) -> bool:
    """DeepSpeed ZeRO-1/2 mixed precision with Adam: a 16-bit model (no autocast) and fp32 master
    weights and moments inside the partitioned optimizer."""
    return (cfg.plan.zero in (1, 2) and cfg.precision in ("bf16-mixed", "fp16-mixed")
            and cfg.optimizer in ("adam", "adamw") and cfg.lora_rank == 0)


def _deepspeed_run(cfg: TrainingConfig) -> TrainingConfig:
    """What is traced for ZeRO-1/2: unsharded, and for DeepSpeed mixed precision the 16-bit model."""
    run = _with_zero(cfg, 0)
    return replace(run, precision="bf16") if _ds_mixed(cfg) else run


def _emulate(b: dict[str, float], cfg: TrainingConfig, zero: int) -> list[str]:
    """ZeRO-1/2 and optimizer offload, derived from the unsharded trace (what was not traced)."""
    out = []
    n = cfg.plan.dp * cfg.plan.cp
    if _ds_mixed(cfg):
        # traced: 16-bit moments (4 B/param); DeepSpeed keeps fp32 master + moments (12 B/param)
        grow = b["optimizer"] * 2
        b["optimizer"] += grow
        b["peak"] += grow
        out.append("16-bit model traced, fp32 master weights and moments (12 B/param, DeepSpeed)")
    k = cfg.plan.state_shards             # hybrid ZeRO-1: states over groups of zero_shard ranks
    if zero >= 1 and k > 1:
        cut = b["optimizer"] * (1 - 1 / k)
        b["optimizer"] -= cut
        b["peak"] -= cut
        out.append(f"zero{zero} optimizer/{k}")
    if zero >= 2 and n > 1:
        cut = b["grad"] * (1 - 1 / n)
        b["grad"] -= cut
        b["peak"] -= cut
        out.append(f"grads/{n}")
    if cfg.offload_optimizer:
        b["peak"] -= b["optimizer"]
        b["optimizer"] = 0.0
        out.append("optimizer offloaded")
    p = cfg.plan
    if p.tp > 1:
        out.append(f"one tp rank's shapes (tp={p.tp}{'+sp' if p.sp else ''})")
    if p.cp > 1:
        out.append(f"cp rank with all-gathered K/V (cp={p.cp})")
    if p.pp > 1:
        out.append("pp stage with in-flight micro-batches")
    return out


def _notes(spec, cfg, schedule, stage) -> list[str]:
    p = cfg.plan
    out = [f"traced with PyTorch under FakeTensorMode: gpuwise.nn model of {spec.name} ({spec.family}), "
           "one warm training step counted (forward, fp32 cross-entropy, backward, optimizer step)",
           "precision " + cfg.precision + " as torchtitan/FSDP2/autocast do it (gpuwise.trace docstring)",
           f"optimizer {cfg.optimizer}" + (" (fused kernel)" if cfg.optimizer in ("adamw", "adam") else ""),
           f"attention {'flash (SDPA kernel)' if cfg.flash_attention else 'eager (s^2 scores kept)'}; "
           f"recompute {cfg.recompute} (gpuwise.trace.recompute)",
           "the trace counts tensors only: CUDA context, NCCL buffers and allocator slack are not traced"]
    if cfg.padding_mask:
        from gpuwise.estimate.memory import padding_mask_note
        from gpuwise.nn import builds_padding_mask

        out.append(padding_mask_note(cfg) + (" (built by the traced model)" if builds_padding_mask(spec) else
                                             " (NOT built by this family's traced model: not counted)"))
    if p.zero == 3 and p.dp * p.cp > 1:
        out.append(f"FSDP2 fully_shard over dp*cp = {p.dp * p.cp} ranks on a fake process group, "
                   f"reshard_after_forward={p.pp == 1}")
    elif p.zero in (1, 2) and p.dp * p.cp > 1:
        out.append(f"ZeRO-{p.zero}: traced unsharded, then optimizer state"
                   + (" and gradients" if p.zero == 2 else "") + f" divided by dp*cp = {p.dp * p.cp} (derived)")
    if p.tp > 1:
        out.append(f"TP: one rank traced with heads, MLP width and vocabulary / {p.tp}"
                   + ("; sequence parallel: norms on seq/tp tokens, all-gathered inputs kept by the linears "
                      "(DTensor semantics)" if p.sp else "; no sequence parallelism"))
    if p.cp > 1:
        out.append(f"CP: one rank holds {cfg.seq_len // p.cp} tokens and the all-gathered K/V of all {p.cp} ranks")
    if p.pp > 1:
        out.append(f"PP {schedule}: first stage keeps min(pp, grad_accum) = {min(p.pp, cfg.grad_accum)} micro-batches "
                   f"in flight, last stage 1 (zb-h1 holds the same peak as 1F1B); peak on the {stage} stage")
    if cfg.grad_accum > 1 and p.pp == 1:
        out.append("gradient accumulation: two micro-steps traced (gradients live during the second forward)")
    from gpuwise.estimate.stack_code import model_code

    code = model_code(cfg.stack)
    if code.stack != "default":
        out.append(_stack_note(spec, cfg, code))
    return out


def _stack_note(spec: ModelSpec, cfg: TrainingConfig, code) -> str:
    """What of the stack's own code the traced reference model runs: the facts `run.build_rank_model` applies."""
    from gpuwise.estimate.levers import resolve
    from gpuwise.estimate.op_inventory import ENCODER_FAMILIES
    from gpuwise.estimate.levers import reference_lora_dropout
    from gpuwise.estimate.stack_code import kbit_fp32_stream, peft_adapters

    decoder = spec.n_encoder_layers == 0 and spec.family not in ENCODER_FAMILIES
    dropout = reference_lora_dropout(cfg)
    applied = [what for on, what in (
        (kbit_fp32_stream(cfg), "its QLoRA recipe's float32 casts (PEFT "
         "prepare_model_for_kbit_training: every frozen 16-bit parameter that is not a 4-bit weight: embeddings, "
         "norms, output layer, biases; the residual stream follows)"),
        (peft_adapters(cfg), "PEFT's LoRA layers (float32 adapters, each casting its input to them; the 4-bit ones "
         "only without autocast)"),
        (dropout > 0, f"LoRA dropout {dropout:g} on each adapter's input (1-byte masks)"),
        (decoder and resolve(cfg).loss_kernel == "chunked" and code.chunk_logits_held, "its chunked loss's held "
         "logits (the model returns every chunk's logits before the loss upcasts each)"),
        (code.separate_lm_head and decoder, "its own output matrix, untied even where the checkpoint ties it to the "
         "embedding (estimate.memory.stack_model)"),
        (decoder and resolve(cfg).loss_kernel == "chunked" and code.logits_fp32_held, "its loop's float32 copy of the "
         "logits, held through the backward and the next step's forward, and its loss over "
         f"{code.loss_chunk_tokens or cfg.seq_len}-token chunks")) if on]
    return (f"stack {cfg.stack}: the trace runs gpuwise.nn's reference model, not {cfg.stack}'s own code; that code's "
            "facts (data/stacks/model_code.csv, e.g. its kept copies and loss loop) are counted by --method analytic "
            "only" + (", except these, applied to the traced model: " + "; ".join(applied) if applied else ""))
