"""The host's floor under an eager PyTorch step: the aten ops it dispatches, times the host's cost per op.

An eager step's host thread issues every op (dispatcher, autograd, kernel launch) while the GPU runs the
kernels already queued; when the GPU's work per op is shorter than the host's cost per op, the GPU waits and
the step takes the host's time. So a step takes at least ``ops x HOST_S_PER_OP``: small models, short
sequences and LoRA's many small ops hit it first.

Op counts: ``gpuwise/data/calibration/host_ops.csv``, counted by `gpuwise.validation.host_ops` on gpuwise.nn's
PyTorch model of each family, and on transformers' own models for the stacks that run them (stacks.csv host:
transformers; `validation.host_ops_hf`) (per precision: per-layer and fixed forward + backward ops, the extra of full
recompute, a frozen base, one LoRA adapter, an 8-chunk loss; each AdamW implementation's ops per trainable
tensor). Families without a row (t5, bert, roberta, explicit models) have no floor, and say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path, read_commented_csv
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

# Host seconds per dispatched aten op of an eager CUDA training step. Rule (`gpuwise.validation.host_ops.fit_host_s_per_op`):
# the largest value under which no measured eager step of gpuwise's H200 grid is shorter than its floor (a floor
# must never exceed a measured step): min over the grid's non-compiled rows of measured step / counted ops, set by
# gpt2-xl (48 layers, 4 x 1,024 tokens: 160.8 ms for 9,905 ops), a row the GPU time alone already predicts: so it
# is an upper bound on the per-op cost (gpt2 alone would give 18.6 us). One host (the H200 machine, torch 2.11 +
# CUDA 13), applied to every GPU: the host CPU and PyTorch version set it, not the GPU. Held out: the check set,
# the runtime's tiny-llama steps on the same machine and ms-swift's small-vs-large model ratios (A100 host).
HOST_S_PER_OP = 16.2e-6
FIT_NOTE = ("16.2 us per op, the largest per-op cost no measured eager step of gpuwise's H200 grid falls below (an "
            "upper bound set by gpt2-xl; one H200 host, torch 2.11, applied to every GPU)")
# TrainingConfig.precision -> the counted precision (autocast precisions cast like bf16-mixed)
PRECISION_ROWS = {"bf16-mixed": "bf16-mixed", "fp16-mixed": "bf16-mixed", "fp8": "bf16-mixed", "bf16": "bf16",
                  "fp32": "fp32", "tf32": "fp32"}


@dataclass(frozen=True)
class FamilyOps:
    """One (family, precision) row of host_ops.csv (its header documents each column)."""

    layer_ops: float
    head_ops: float
    recompute_layer_ops: float
    recompute_head_ops: float
    lora_layer_ops: float
    lora_target_ops: float
    lora_head_ops: float
    lora_recompute_layer_ops: float
    lora_recompute_target_ops: float
    chunked_loss_ops: float
    tensors_per_layer: float
    tensors_fixed: float


@dataclass(frozen=True)
class HostCount:
    ops: float                  # aten ops one optimizer step dispatches on the busiest rank
    notes: tuple[str, ...]      # what the count leaves out for this configuration
    optimizer_ops: float = 0.0  # of which the optimizer step's
    code: str = "gpuwise.nn"    # whose model code was counted: gpuwise.nn | transformers


@lru_cache(maxsize=1)
def _table() -> tuple[dict[tuple[str, str, str], FamilyOps], dict[str, float]]:
    fam, uni = {}, {}
    for r in read_commented_csv(data_path("calibration", "host_ops.csv")):
        if r["family"] == "universal":
            uni[r["preset"]] = float(r["layer_ops"])
            continue
        fam[r["family"], r["precision"], r["code"]] = FamilyOps(*(float(r[c]) for c in FamilyOps.__dataclass_fields__))
    return fam, uni


def _row(spec: ModelSpec, cfg: TrainingConfig) -> tuple[FamilyOps | None, str, str]:
    """(the counted row of the stack's model code (stacks.csv host: transformers, else gpuwise.nn), that code, a note
    where the stack's own code has no row and gpuwise.nn's stands in)."""
    from gpuwise.workload.stacks import stack_row

    fam, _ = _table()
    precision = PRECISION_ROWS.get(cfg.precision, "bf16-mixed")
    if stack_row(cfg.stack).host == "transformers":
        row = fam.get((spec.family, precision, "transformers"))
        if row is not None:
            return row, "transformers", ""
        stand_in = f"{spec.family}: gpuwise.nn's count stands in for transformers'"
        return fam.get((spec.family, precision, "gpuwise.nn")), "gpuwise.nn", stand_in
    return fam.get((spec.family, precision, "gpuwise.nn")), "gpuwise.nn", ""


def _gaps(spec: ModelSpec, cfg: TrainingConfig, loss: str, code: str) -> tuple[str, ...]:
    """What the count leaves out for ``cfg`` (said with every estimate that uses it)."""
    from gpuwise.workload.training import recompute_policy

    out = []
    if cfg.optimizer not in ("adamw", "adam"):
        out.append(f"the {cfg.optimizer} step counted as AdamW's")
    if recompute_policy(cfg.recompute).kind in ("selective", "op"):
        out.append(f"{cfg.recompute} recompute's re-run ops not counted")
    if cfg.quantize:
        out.append(("NF4" if cfg.quantize == "nf4" else cfg.quantize) + " dequantisation ops not counted")
    if cfg.dora:
        out.append("DoRA's extra ops taken from the adapters' counted kernels (their views not counted)")
    if loss not in ("eager", "eager-nocast", "chunked"):
        out.append(f"loss kernel {loss} counted as eager")
    if spec.family == "qwen3" and code == "gpuwise.nn":
        out.append("qwen3's q/k RMSNorm ops not counted (gpuwise.nn has none)")
    if cfg.plan.cp > 1:
        out.append("context-parallel ring ops (per-chunk attention, sends, log-sum-exp merges) not counted")
    if cfg.plan.tp > 1:
        out.append("tensor-parallel collectives (and sequence-parallel gathers) not counted")
    if cfg.plan.zero == 3 and cfg.plan.dp * cfg.plan.cp > 1:
        out.append("FSDP's hooks, all-gathers and reduce-scatters not counted")
    if cfg.plan.pp > 1:
        out.append("pipeline sends and receives not counted")
    if cfg.precision in ("fp16-mixed", "fp8"):
        out.append(f"{cfg.precision}: counted as bf16 autocast (its GradScaler / FP8 casts not counted)")
    return tuple(out)


def _dora_extra_ops(cfg: TrainingConfig, share: float) -> float:
    """Ops DoRA adds to each adapted linear over LoRA's: the difference of the two layers' counted kernels
    (calibration/adapter_traffic.csv; views, which dispatch too, are not in those counts) in each forward and re-run
    forward and the backward."""
    if not cfg.dora:
        return 0.0
    from dataclasses import replace

    from gpuwise.estimate.adapter_traffic import adapter_traffic

    d, lo = adapter_traffic(cfg), adapter_traffic(replace(cfg, dora=False))
    return (1 + share) * (d.fwd_kernels - lo.fwd_kernels) + d.bwd_kernels - lo.bwd_kernels


def count_step(spec: ModelSpec, cfg: TrainingConfig) -> HostCount | None:
    """Aten ops one optimizer step of ``cfg`` dispatches on its busiest rank (None: no counted row)."""
    _, uni = _table()
    row, code, stand_in = _row(spec, cfg)
    if row is None or not spec.is_transformer:
        return None
    from gpuwise.estimate.levers import resolve
    from gpuwise.estimate.lora import adapted_linears, lora_modules
    from gpuwise.estimate.op_inventory import reforwarded_blocks

    lev = resolve(cfg)
    n = spec.n_layers + spec.n_encoder_layers
    layers, share = math.ceil(n / cfg.plan.pp), reforwarded_blocks(n, cfg.recompute)
    fixed = (row.chunked_loss_ops if lev.loss_kernel == "chunked" else 0.0) + (share > 0) * row.recompute_head_ops
    if cfg.frozen_base:
        adapters, head = adapted_linears(spec, cfg.lora_targets), "head" in lora_modules(cfg.lora_targets)
        per_layer = (row.lora_layer_ops + adapters * row.lora_target_ops
                     + share * (row.lora_recompute_layer_ops + adapters * row.lora_recompute_target_ops))
        fixed += row.lora_head_ops + head * row.lora_target_ops
        per_layer += adapters * _dora_extra_ops(cfg, share)
        tensors = (3 if cfg.dora else 2) * (layers * adapters + head)        # A, B (and DoRA's magnitude)
    else:
        per_layer = row.layer_ops + share * row.recompute_layer_ops
        fixed += row.head_ops
        tensors = layers * row.tensors_per_layer + row.tensors_fixed
    impl = lev.optimizer_impl
    opt = 0.0 if cfg.cpu_offload or cfg.offload_optimizer else uni[f"opt_{impl}_fixed"] + uni[f"opt_{impl}_per_tensor"] * tensors
    gaps = _gaps(spec, cfg, lev.loss_kernel, code) + ((stand_in,) if stand_in else ())
    return HostCount(cfg.grad_accum * (layers * per_layer + fixed) + opt, gaps, opt, code)


def step_ops(spec: ModelSpec, cfg: TrainingConfig) -> float | None:
    got = count_step(spec, cfg)
    return None if got is None else got.ops
