"""Bytes per parameter of the model states (weights, gradients, optimizer) and ZeRO sharding.

Accounting follows the ZeRO paper (Rajbhandari et al. 2020, arXiv 1910.02054): with mixed
precision and Adam, each parameter costs 2 bytes of fp16/bf16 weights, 2 bytes of gradients and
K = 12 bytes of optimizer state (fp32 master weights, momentum and variance). ZeRO stage 1 shards
the optimizer state over the Nd data-parallel ranks, stage 2 also the gradients, stage 3 also the
weights:  stage 0: (2+2+K)Ψ,  1: 4Ψ + KΨ/Nd,  2: 2Ψ + (2+K)Ψ/Nd,  3: (4+K)Ψ/Nd.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import InputError
from gpuwise.workload.training import OPTIMIZERS, PRECISIONS

# Storage bytes of the weights and gradients held on the GPU, by training precision.
_WEIGHT_BYTES = {"fp32": 4, "bf16-mixed": 2, "fp16-mixed": 2, "bf16": 2, "fp8": 2}
# fp8 (Transformer Engine): the fp8 copy of each weight and of its transpose, cached next to the 16-bit weights
FP8_WEIGHT_CACHE = 2
# Mixed precision keeps an fp32 master copy of the weights inside the optimizer.
_MASTER_BYTES = {"fp32": 0, "bf16-mixed": 4, "fp16-mixed": 4, "bf16": 0, "fp8": 4}
# Optimizer moments stored per parameter (fp32 moments except pure bf16, which keeps them in bf16).
_MOMENTS = {"adamw": 2, "adam": 2, "sgd": 1, "adafactor": 0, "adamw-8bit": 2, "adamw8bit": 2, "paged_adamw8bit": 2}
# bitsandbytes block-wise 8-bit moments (adamw-8bit: gpuwise's older spelling of adamw8bit)
EIGHT_BIT = ("adamw-8bit", "adamw8bit", "paged_adamw8bit")


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of one training precision/optimizer pair."""

    weights: float
    gradients: float
    optimizer: float      # includes the master weights of mixed precision (ZeRO's K)


def state_bytes(precision: str, optimizer: str, hidden: int = 0, fp32_grads: bool = False) -> StateBytes:
    """Bytes per trainable parameter.

    precision: fp32 | bf16-mixed | fp16-mixed | bf16 (pure bf16 weights and optimizer states)
    optimizer: adamw | adam | sgd (with momentum) | adafactor (factored second moment, no momentum)
               | adamw8bit / adamw-8bit / paged_adamw8bit (bitsandbytes block-wise 8-bit moments: 1 B per
               moment + an fp32 absmax per 2048 values, ~2 B per parameter for AdamW's two moments)
    hidden: model width; Adafactor keeps a row and a column vector per matrix, about 2/hidden
            values per parameter (0 -> 1% of the parameters, for non-transformers)
    fp32_grads: gradients accumulated in an fp32 buffer (Megatron-LM's main_grad) instead of the
            weights' dtype
    """
    if precision not in PRECISIONS:
        raise InputError("precision", precision, "use one of " + ", ".join(PRECISIONS))
    if optimizer not in OPTIMIZERS:
        raise InputError("optimizer", optimizer, "use one of " + ", ".join(OPTIMIZERS))
    w = _WEIGHT_BYTES[precision]
    moment = 2 if precision == "bf16" else 4
    if optimizer in EIGHT_BIT:
        per_moment = 1 + 8 / 2048          # int8 value + fp32 absmax per 2048-value block
    else:
        per_moment = moment
    opt = _MOMENTS[optimizer] * per_moment
    if optimizer == "adafactor":
        opt = moment * (2.0 / hidden if hidden else 0.01)
    cache = FP8_WEIGHT_CACHE if precision == "fp8" else 0
    return StateBytes(weights=w + cache, gradients=4 if fp32_grads else w, optimizer=opt + _MASTER_BYTES[precision])


def zero_model_state_bytes(psi: float, dp: int, stage: int, k: float = 12.0,
                           weight_bytes: float = 2.0, grad_bytes: float = 2.0) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU for Ψ parameters under ZeRO `stage` over
    `dp` data-parallel ranks (the ZeRO paper's formulas, with its 2/2/K bytes by default)."""
    if stage not in (0, 1, 2, 3):
        raise InputError("zero", stage, "use a ZeRO stage 0, 1, 2 or 3")
    return (weight_bytes * psi / (dp if stage >= 3 else 1),
            grad_bytes * psi / (dp if stage >= 2 else 1),
            k * psi / (dp if stage >= 1 else 1))


@dataclass(frozen=True)
class StateSemantics:
    """What one framework keeps per parameter (bytes), beyond the ZeRO-paper bookkeeping.

    weights:   the stored (sharded under ZeRO-3/FSDP) parameters
    gradients: per trainable parameter, as accumulated
    optimizer: per trainable parameter (moments, plus master weights where they are separate)
    compute:   bytes of the copy the matmuls read when it differs from the stored weights
               (FSDP2's unsharded param_dtype copy; autocast's cached casts), 0 when none
    reduce:    bytes of a gradient in the reduction dtype (FSDP2 reduce_dtype)
    framework: "torch" (torchtitan / FSDP2 / autocast), "deepspeed" (ZeRO-1/2) or "megatron"
    """

    weights: float
    gradients: float
    optimizer: float
    compute: float
    reduce: float
    framework: str


def state_semantics(precision: str, optimizer: str, hidden: int = 0, zero: int = 0,
                    fp32_grads: bool = False) -> StateSemantics:
    """Per-parameter bytes as the frameworks allocate them.

    - fp32_grads (Megatron-LM: 16-bit weights, fp32 main_grad, fp32 master + moments) and ZeRO-1/2
      (DeepSpeed: 16-bit weights and gradients, fp32 master + moments): the ZeRO-paper accounting
      of `state_bytes`, no separate compute copy.
    - otherwise PyTorch-native (ZeRO-0 = DDP / one GPU with torch.autocast; ZeRO-3 = FSDP2
      fully_shard with MixedPrecisionPolicy(param_dtype=bf16|fp16, reduce_dtype=fp32), torchtitan's
      defaults): mixed precision keeps fp32 parameters (they are the master weights), fp32
      gradients and fp32 moments (4 + 4 + 8 B with AdamW); the matmuls read a 16-bit copy
      (FSDP2: the all-gathered unsharded param_dtype copy; autocast: the cached bf16 casts of the
      weights, kept from forward until their backward). fp32: 4 + 4 + 8, the compute copy is the
      all-gather output under FSDP. bf16 (pure): 2 + 2 + 4 (bf16 moments).
    """
    sb = state_bytes(precision, optimizer, hidden, fp32_grads)
    if fp32_grads:
        return StateSemantics(sb.weights, sb.gradients, sb.optimizer, 0.0, 4.0, "megatron")
    if zero in (1, 2):
        return StateSemantics(sb.weights, sb.gradients, sb.optimizer, 0.0, sb.gradients, "deepspeed")
    stored = 2 if precision == "bf16" else 4
    moments = sb.optimizer - _MASTER_BYTES[precision]
    if precision in ("fp32", "bf16"):
        compute = float(stored) if zero == 3 else 0.0
    else:
        compute = 2.0
    reduce = 2.0 if precision == "bf16" else 4.0
    cache = FP8_WEIGHT_CACHE if precision == "fp8" else 0
    return StateSemantics(float(stored + cache), float(stored), moments, compute, reduce, "torch")
