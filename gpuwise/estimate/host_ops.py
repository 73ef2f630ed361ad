"""The host's floor under an eager PyTorch step: the aten ops it dispatches, times the host's cost per op.

An eager step's host thread issues every op (dispatcher, autograd, kernel launch) while the GPU runs the
kernels already queued; when the GPU's work per op is shorter than the host's cost per op, the GPU waits and
the step takes the host's time. So a step takes at least ``ops x HOST_S_PER_OP``: small models, short
sequences and LoRA's many small ops hit it first.

Op counts: ``gpuwise/data/calibration/host_ops.csv``, counted on real modules by
`gpuwise.validation.host_ops` (per family: per-layer and fixed forward + backward ops, the extra of full
recompute, a frozen base, one LoRA adapter; each AdamW implementation's ops per trainable tensor).
Families without a row (t5, bert, roberta, explicit models) have no floor, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path, read_commented_csv
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

# Host seconds per dispatched aten op of an eager CUDA training step. Rule (`gpuwise.validation.host_ops.fit_host_s_per_op`):
# the largest value under which no measured eager step of gpuwise's H200 grid is shorter than its floor (a floor
# must never exceed a measured step): min over the grid's non-compiled rows of measured step / counted ops, set by
# gpt2-xl (48 layers, 4 x 1,024 tokens: 160.8 ms for 9,905 ops). One host (H200 machine, torch 2.11 + CUDA 13);
# the host CPU and PyTorch version set it, not the GPU. Held out: the check set, the runtime's tiny-llama steps on
# the same machine (runtime_h200_smoke.csv) and ms-swift's small-vs-large model throughput ratios (A100 host).
HOST_S_PER_OP = 16.2e-6
FIT_NOTE = ("16.2 us per dispatched aten op: the largest value no measured eager step of gpuwise's H200 grid falls "
            "below (set by gpt2-xl; one host, torch 2.11): a property of the host CPU and PyTorch version")


@dataclass(frozen=True)
class FamilyOps:
    layer_ops: float            # forward + backward ops per layer (full training, no recompute)
    head_ops: float             # embedding, final norm, output layer and loss, forward + backward
    recompute_layer_ops: float  # extra per layer when the whole block is re-run in backward
    lora_layer_ops: float       # per-layer ops with the base frozen (no weight gradients), adapters apart
    lora_target_ops: float      # one LoRA adapter's ops, forward + backward
    lora_head_ops: float        # the fixed ops with the base frozen (no embedding / output-layer weight gradients)
    lora_recompute_layer_ops: float   # full recompute's extra per layer with the base frozen, adapters apart
    lora_recompute_target_ops: float  # full recompute's extra per adapter (its forward again)
    tensors_per_layer: float    # trainable parameter tensors per layer (full training)
    tensors_fixed: float


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, FamilyOps], dict[str, float]]:
    fam, uni = {}, {}
    for r in read_commented_csv(data_path("calibration", "host_ops.csv")):
        if r["family"] == "universal":
            uni[r["preset"]] = float(r["layer_ops"])
            continue
        fam[r["family"]] = FamilyOps(*(float(r[c]) for c in ("layer_ops", "head_ops", "recompute_layer_ops",
                                                             "lora_layer_ops", "lora_target_ops", "lora_head_ops",
                                                             "lora_recompute_layer_ops", "lora_recompute_target_ops",
                                                             "tensors_per_layer",
                                                             "tensors_fixed")))
    return fam, uni


def adapted_linears(spec: ModelSpec, targets: str) -> int:
    """Linear modules per layer that carry a LoRA adapter (a fused QKV matrix carries one; experts each one)."""
    from gpuwise.estimate.lora import FUSED_GATE_UP, FUSED_QKV, lora_modules

    mods = lora_modules(targets)
    qkv, gate_up = mods & {"q", "k", "v"}, mods & ({"gate", "up"} if spec.gated_mlp else {"up"})
    attn = (1 if qkv else 0) if spec.family in FUSED_QKV else len(qkv)
    mlp = ((1 if gate_up else 0) if spec.family in FUSED_GATE_UP else len(gate_up)) + ("down" in mods)
    return attn + (1 if "o" in mods else 0) + max(1, spec.n_experts) * mlp


def step_ops(spec: ModelSpec, cfg: TrainingConfig) -> float | None:
    """Aten ops one optimizer step of ``cfg`` dispatches on one rank (None: no counted row for the family)."""
    fam, uni = _table()
    row = fam.get(spec.family)
    if row is None or not spec.is_transformer:
        return None
    from gpuwise.estimate.levers import resolve
    from gpuwise.estimate.op_inventory import reforwarded_blocks

    layers = (spec.n_layers + spec.n_encoder_layers) / cfg.plan.pp
    lora = cfg.lora_rank > 0 or cfg.quantize is not None
    adapters = adapted_linears(spec, cfg.lora_targets) if lora else 0
    share = reforwarded_blocks(spec.n_layers + spec.n_encoder_layers, cfg.recompute)
    if lora:
        per_layer = (row.lora_layer_ops + adapters * row.lora_target_ops
                     + share * (row.lora_recompute_layer_ops + adapters * row.lora_recompute_target_ops))
    else:
        per_layer = row.layer_ops + share * row.recompute_layer_ops
    micro = layers * per_layer + (row.lora_head_ops if lora else row.head_ops)
    tensors = layers * adapters * 2 if lora else layers * row.tensors_per_layer + row.tensors_fixed
    impl = resolve(cfg).optimizer_impl
    opt = 0.0 if cfg.cpu_offload else uni[f"opt_{impl}_fixed"] + uni[f"opt_{impl}_per_tensor"] * tensors
    return cfg.grad_accum * micro + opt


def host_step_s(spec: ModelSpec, cfg: TrainingConfig) -> float | None:
    """Seconds the host needs to issue one optimizer step of ``cfg`` (None: not counted for this family)."""
    ops = step_ops(spec, cfg)
    return None if ops is None else ops * HOST_S_PER_OP
