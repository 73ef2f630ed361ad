"""FLOPs of one training step.

Transformers (Narayanan et al. 2021 / Korthikanti et al. 2022 accounting, generalised to GQA, gated
MLPs and MoE): forward FLOPs per token =
    2 * (matmul parameters active per token: layers + LM head)         weight matmuls
  + 4 * n_layers * seq_len * n_heads * head_dim                          QK^T and attention x V
(full seq_len, no causal halving -- the convention of the Megatron papers and of PaLM's MFU).
Embedding lookups are free. MoE layers count only the experts a token is routed to (active params).

Training = forward + backward (2x forward) = 3x forward; activation recomputation adds a forward
(full), every K-th block's forward without the LM head (layer-K), every second weight
matmul (op) or the attention-score part (selective) -- hardware FLOPs, not model FLOPs (MFU uses model
FLOPs). LoRA/QLoRA: frozen weights need no weight gradients, so backward is ~1x forward (2x total).
Non-transformers use the preset's forward ``flops_per_sample``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import InputError
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig, recompute_policy


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one optimizer step for the whole job (all GPUs)."""

    model_flops: float        # forward + backward, no recompute (MFU numerator)
    hardware_flops: float     # what the GPUs execute, incl. recompute
    forward_flops: float      # one forward pass
    samples: int              # samples (sequences) per step
    tokens: int               # tokens per step (= samples for non-token models)


def _matmul_params_per_token(spec: ModelSpec) -> float:
    from gpuwise.workload.models import param_counts

    pc = param_counts(spec)
    layers = pc.layer_active * pc.n_layers + pc.encoder_layer * pc.n_encoder_layers
    # tied embeddings share the LM head's weights, but the output matmul still runs
    head = pc.lm_head or spec.hidden * spec.vocab_size
    return float(layers + head)


def forward_flops_per_token(spec: ModelSpec, seq_len: int) -> tuple[float, float]:
    """(weight-matmul FLOPs, attention-score FLOPs) of one forward pass, per token."""
    if not spec.is_transformer:
        raise InputError("model", spec.name, "not a transformer; use flops_per_sample")
    head_dim = spec.head_dim or spec.hidden // max(spec.n_heads, 1)
    attn = 4.0 * (spec.n_layers + spec.n_encoder_layers) * seq_len * spec.n_heads * head_dim
    return 2.0 * _matmul_params_per_token(spec), attn


def _recompute_flops(spec: ModelSpec, cfg: TrainingConfig, mm: float, attn: float) -> float:
    """Forward FLOPs recomputed in backward by the recompute policy (training.recompute_policy):
    selective = the attention scores; op = every second weight matmul (torchtitan op-level SAC; the
    attention kernel's output is saved); layer-K = the forward of every K-th block; full = all."""
    from gpuwise.estimate.activations import op_sac_recomputed_fraction

    pol = recompute_policy(cfg.recompute)
    layers = spec.n_layers + spec.n_encoder_layers
    block_mm = mm * (1 - _lm_head_share(spec))
    if pol.kind == "selective":
        return attn
    if pol.kind == "op":
        return block_mm * op_sac_recomputed_fraction(spec)
    if pol.kind == "layer":
        return (block_mm + attn) * (layers // pol.every) / layers
    return mm + attn if pol.kind == "full" else 0.0     # full: a whole forward (the convention kept)


def _lm_head_share(spec: ModelSpec) -> float:
    from gpuwise.workload.models import param_counts

    pc = param_counts(spec)
    return pc.lm_head / _matmul_params_per_token(spec)


def step_flops(spec: ModelSpec, cfg: TrainingConfig) -> StepFlops:
    """FLOPs of one optimizer step of ``cfg`` (global batch = micro_batch * grad_accum * dp)."""
    samples = cfg.global_batch()
    lora = cfg.frozen_base
    bwd_factor = 1.0 if lora else 2.0
    if spec.is_transformer:
        tokens = samples * cfg.seq_len
        mm, attn = forward_flops_per_token(spec, cfg.seq_len)
        fwd = (mm + attn) * tokens
        recompute = _recompute_flops(spec, cfg, mm * tokens, attn * tokens)
    else:
        if not spec.flops_per_sample:
            raise InputError("model", spec.name, "needs flops_per_sample (forward FLOPs per sample) to estimate speed")
        tokens = samples
        fwd = spec.flops_per_sample * samples
        recompute = fwd if cfg.recompute == "full" else 0.0
    model = fwd * (1.0 + bwd_factor)
    return StepFlops(model, model + recompute, fwd, samples, tokens)
