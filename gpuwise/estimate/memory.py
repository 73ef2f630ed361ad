"""Per-GPU peak memory of one training step: parameters, gradients, optimizer, activations, overhead.

The peak is taken over pipeline stages: stage i of a 1F1B pipeline with pp stages keeps
min(pp - i, grad_accum) micro-batches in flight (stage 0 holds pp of them when there are at least
pp micro-batches per step), holds the embedding (stage 0) or the output layer (last stage), and
its share of the layers (the remainder of layers / pp goes to the last stages, which hold fewer
micro-batches). Tensor parallelism splits matrices (norms and row-parallel biases replicated),
ZeRO shards optimizer state (1), gradients (2) and weights (3) over the dp ranks, context
parallelism splits the sequence. Sources: ZeRO paper (model states), Korthikanti et al. 2022
(activations), QLoRA (NF4), see model_states.py, activations.py, lora.py, overhead.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from gpuwise.errors import InputError
from gpuwise.estimate import activations as act
from gpuwise.estimate.lora import NF4_BYTES, TARGETS_TEXT, adapter_params, attention_blocks
from gpuwise.estimate.model_states import state_bytes
from gpuwise.estimate.overhead import GIB, describe as describe_overhead, overhead_bytes
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.models import load_model, param_count, param_counts
from gpuwise.workload.training import OPTIMIZERS, PRECISIONS, RECOMPUTE, TrainingConfig

PARTS = ("parameters", "gradients", "optimizer", "activations", "overhead")


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes on the most loaded GPU of a training configuration."""

    parameters: float            # weights held on the GPU (incl. ZeRO-3 gather buffer)
    gradients: float
    optimizer: float             # optimizer states incl. fp32 master weights
    activations: float           # saved for backward, at the peak pipeline stage
    overhead: float              # CUDA context, fragmentation, temporaries
    params: int                  # model parameters (all)
    trainable_params: int        # parameters that get gradients (LoRA: adapters only)
    peak_stage: int = 0          # pipeline stage with the peak
    notes: tuple[str, ...] = field(default=())   # the assumptions (immutable: estimates are memoised)

    @property
    def assumptions(self) -> list[str]:
        """What the estimate assumes (a fresh list each time)."""
        return list(self.notes)

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.overhead

    @property
    def per_gpu_gib(self) -> float:
        return self.total / GIB

    def breakdown_gib(self) -> dict[str, float]:
        return {k: getattr(self, k) / GIB for k in PARTS}

    def fits(self, gpu: GpuSpec) -> bool:
        """True if the peak fits in the GPU's usable memory."""
        return self.total <= gpu.memory_gib * GIB

    def headroom_gib(self, gpu: GpuSpec) -> float:
        return gpu.memory_gib - self.per_gpu_gib


# ------------------------------------------------------------------ input checks

def check_config(spec: ModelSpec, cfg: TrainingConfig) -> None:
    """Raise InputError (one line: field, value, fix) for settings that cannot be trained."""
    p = cfg.plan
    for name, value in (("batch-size", cfg.micro_batch), ("seq-len", cfg.seq_len), ("grad-accum", cfg.grad_accum),
                        ("dp", p.dp), ("tp", p.tp), ("pp", p.pp), ("cp", p.cp)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InputError(name, value, "must be a positive integer")
    if cfg.precision not in PRECISIONS:
        raise InputError("precision", cfg.precision, "use one of " + ", ".join(PRECISIONS))
    if cfg.optimizer not in OPTIMIZERS:
        raise InputError("optimizer", cfg.optimizer, "use one of " + ", ".join(OPTIMIZERS))
    if cfg.recompute not in RECOMPUTE:
        raise InputError("recompute", cfg.recompute, "use one of " + ", ".join(RECOMPUTE))
    if p.zero not in (0, 1, 2, 3):
        raise InputError("zero", p.zero, "use a ZeRO stage 0, 1, 2 or 3")
    if cfg.lora_rank < 0:
        raise InputError("lora-rank", cfg.lora_rank, "use 0 (full fine-tuning) or a positive rank")
    if cfg.quantize not in (None, "nf4"):
        raise InputError("quantize", cfg.quantize, "the only 4-bit format supported is nf4")
    if cfg.quantize and cfg.lora_rank <= 0:
        raise InputError("quantize", cfg.quantize, "a 4-bit base is frozen: add --lora-rank R (QLoRA)")
    if not spec.is_transformer:
        if p.tp > 1 or p.pp > 1 or p.cp > 1:
            raise InputError("tp/pp/cp", f"{p.tp}/{p.pp}/{p.cp}",
                             f"{spec.name} is described by explicit numbers; use data parallelism (tp=pp=cp=1)")
        if cfg.lora_rank or cfg.quantize:
            raise InputError("lora-rank", cfg.lora_rank, f"LoRA/4-bit need a transformer; {spec.name} is not one")
        return
    if spec.n_heads % p.tp or spec.n_kv_heads % p.tp:
        raise InputError("tp", p.tp, f"must divide the {spec.n_heads} attention heads and {spec.n_kv_heads} "
                         f"key/value heads of {spec.name}")
    layers = spec.n_layers + spec.n_encoder_layers
    if p.pp > layers:
        raise InputError("pp", p.pp, f"at most {layers} pipeline stages ({spec.name} has {layers} layers)")
    if cfg.seq_len % p.cp:
        raise InputError("cp", p.cp, f"must divide the sequence length {cfg.seq_len}")
    if spec.learned_pos_emb and spec.max_seq_len and cfg.seq_len > spec.max_seq_len:
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
    oh = overhead_bytes(a, context)
    notes = (f"{spec.name}: {n:,} parameters and {spec.activation_bytes_per_sample / 1e6:.1f} MB of fp32 activations "
             f"per {spec.sample_unit} ({spec.source}); 16-bit activations take half",
             "recompute is not modelled for explicit (non-transformer) models")
    return MemoryEstimate(w, g, o, a, oh, n, n, 0, notes)


@lru_cache(maxsize=16384)
def _estimate(spec: ModelSpec, cfg: TrainingConfig, fp32_grads: bool, lm_head: bool, interleave: int,
              context: bool) -> MemoryEstimate:
    check_config(spec, cfg)
    if not spec.is_transformer:
        return _explicit_estimate(spec, cfg, fp32_grads, context)
    p = cfg.plan
    counts = param_counts(spec)
    total_params = counts.total
    sb = state_bytes(cfg.precision, cfg.optimizer, spec.hidden, fp32_grads)
    lora = cfg.lora_rank > 0
    trainable = adapter_params(spec, cfg.lora_rank) if lora else total_params
    adapters_per_block = trainable / attention_blocks(spec) if lora else 0.0

    # bytes of a frozen base weight: linear layers in NF4 when quantized, else the weights' dtype
    frozen_other = sb.weights if cfg.precision != "fp32" else 4
    frozen_linear = NF4_BYTES if cfg.quantize == "nf4" else frozen_other

    def layer_state(n_params: int, n_rep: int, blocks: int) -> tuple[float, float, float]:
        """(weights, grads, optimizer) bytes of one layer on one GPU, before ZeRO."""
        split = (n_params - n_rep) / p.tp
        if not lora:
            per = split + n_rep
            return per * sb.weights, per * sb.gradients, per * sb.optimizer
        ad = blocks * adapters_per_block / p.tp
        w = split * frozen_linear + n_rep * frozen_other + ad * sb.weights
        return w, ad * sb.gradients, ad * sb.optimizer

    def flat_state(n_params: float) -> tuple[float, float, float]:
        """Embedding / output layer / final norms: trainable only in full fine-tuning."""
        if lora:
            return n_params * frozen_other, 0.0, 0.0
        return n_params * sb.weights, n_params * sb.gradients, n_params * sb.optimizer

    enc_rep = counts.layer_replicated * 2 // 3 if spec.family == "t5" else 0   # t5 encoder: 2 of the 3 norms
    enc_l = layer_state(counts.encoder_layer, enc_rep, 1)
    dec_l = layer_state(counts.layer, counts.layer_replicated, 2 if spec.family == "t5" else 1)

    st = act.ActivationSetting(micro_batch=cfg.micro_batch, seq_len=cfg.seq_len, tp=p.tp, sp=p.sp, cp=p.cp,
                               bytes_per_value=_act_bytes_per_value(cfg.precision),
                               flash=cfg.flash_attention, recompute=cfg.recompute, frozen_base=lora)
    n_enc, n_dec = spec.n_encoder_layers, spec.n_layers
    layers_per_stage = _stage_layers(n_enc + n_dec, p.pp)
    dp3 = p.dp if p.zero >= 3 else 1
    dp2 = p.dp if p.zero >= 2 else 1
    dp1 = p.dp if p.zero >= 1 else 1
    t5 = spec.family == "t5"
    # per-layer activations of one micro-batch (the same on every stage)
    enc_keep = act.stack_bytes(spec, st, 1) if n_enc else 0.0
    dec_keep = act.stack_bytes(spec, st, 1, t5)
    enc_work = act.working_set_bytes(spec, st, False) if n_enc else 0.0
    dec_work = act.working_set_bytes(spec, st, t5)
    emb_act = act.embedding_bytes(spec, st)
    head_act = act.head_bytes(spec, st, lm_head)
    grad_per_weight = sb.gradients / sb.weights
    best = None
    start = 0
    for i, n_i in enumerate(layers_per_stage):
        enc_i = max(0, min(start + n_i, n_enc) - start)
        dec_i = n_i - enc_i
        start += n_i
        w = enc_i * enc_l[0] + dec_i * dec_l[0]
        g = enc_i * enc_l[1] + dec_i * dec_l[1]
        o = enc_i * enc_l[2] + dec_i * dec_l[2]
        flat = 0.0
        if i == 0:
            flat += counts.embedding / p.tp
        if i == p.pp - 1:
            flat += counts.final + counts.lm_head / p.tp
            if p.pp > 1 and spec.tied_embeddings:
                flat += spec.vocab_size * spec.hidden / p.tp       # output layer's copy of the embedding
        fw, fg, fo = flat_state(flat)
        w, g, o = (w + fw) / dp3, (g + fg) / dp2, (o + fo) / dp1
        if p.zero >= 3 and p.dp > 1:
            # gathered (unsharded) weights and their gradients of the largest layer in flight
            big = max(enc_l[0] if enc_i else 0.0, dec_l[0] if dec_i else 0.0)
            w += big
            g += 0.0 if lora else big * grad_per_weight
        if cfg.offload_optimizer:
            o = 0.0
            if p.zero >= 2:
                g = 0.0          # gradient partitions are reduced straight into host memory
        in_flight = max(1, min(p.pp - i, cfg.grad_accum))
        stack = enc_i * enc_keep + dec_i * dec_keep
        if i == 0 and interleave > 1 and p.pp > 1:
            stack *= 1 + (p.pp - 1) / (p.pp * interleave)        # Korthikanti et al. eq. for interleaving
        a = in_flight * stack + max(enc_work if enc_i else 0.0, dec_work if dec_i else 0.0)
        if i == 0:
            a += in_flight * emb_act
        if i == p.pp - 1:
            a += head_act
        total = w + g + o + a
        if best is None or total > best[0]:
            best = (total, i, w, g, o, a)
    _, stage, w, g, o, a = best
    oh = overhead_bytes(a, context)
    return MemoryEstimate(w, g, o, a, oh, total_params, trainable, stage,
                          tuple(_assumptions(spec, cfg, sb, lora, fp32_grads, stage)))


def _assumptions(spec, cfg, sb, lora, fp32_grads, stage) -> list[str]:
    p = cfg.plan
    out = [
        f"{spec.name}: {param_count(spec):,} parameters ({spec.source or 'structure from config.json'})",
        f"{cfg.precision} + {cfg.optimizer}: {sb.weights:g} B weights, {sb.gradients:g} B gradients, "
        f"{sb.optimizer:.4g} B optimizer state per trainable parameter (ZeRO-paper accounting"
        + ("; fp32 gradient buffer" if fp32_grads else "") + ")",
        f"ZeRO stage {p.zero} over dp={p.dp}" + (" (stage 3 adds the gathered weights of one layer)" if p.zero == 3 else ""),
        "activations: Korthikanti et al. 2022 per-tensor accounting generalised to GQA"
        + (", gated MLP (4 tensors of ffn width)" if spec.gated_mlp else "")
        + (f", MoE top-{spec.experts_per_token} of {spec.n_experts}" if spec.n_experts > 1 else "")
        + ("; dropout masks kept" if act.has_dropout(spec) else "; no dropout")
        + ("; flash attention (no s^2 scores)" if cfg.flash_attention else "; eager attention keeps s^2 scores")
        + f"; recompute {cfg.recompute}",
        "logits kept in the model dtype plus a float32 log-softmax (unfused cross-entropy)",
        describe_overhead(),
    ]
    if p.pp > 1:
        out.append(f"1F1B pipeline: stage i keeps min(pp-i, grad_accum={cfg.grad_accum}) micro-batches in flight; "
                   f"peak on stage {stage}")
    if p.cp > 1:
        out.append(f"context parallel cp={p.cp} splits the sequence; weights replicated over cp")
    if lora:
        out.append(f"LoRA rank {cfg.lora_rank}: {TARGETS_TEXT}; frozen base; inputs that feed only frozen "
                   "matrices are not kept for backward")
    if cfg.quantize:
        out.append(f"NF4 base: {NF4_BYTES:.3f} B per linear-layer weight (QLoRA double quantisation); "
                   "embeddings, norms and output layer in 16-bit")
    if cfg.offload_optimizer:
        out.append("optimizer states and master weights in host memory"
                   + (" (gradients reduced to host too: ZeRO>=2)" if p.zero >= 2 else ""))
    return out


def estimate_memory(model: ModelSpec | str, cfg: TrainingConfig, gpu: GpuSpec | None = None, *,
                    fp32_grads: bool = False, lm_head: bool = True, interleave: int = 1,
                    context: bool = True) -> MemoryEstimate:
    """Per-GPU peak memory of one training step.

    model: ModelSpec or preset name / config.json path
    cfg: training settings and the parallel plan (cfg.micro_batch is per GPU)
    gpu: only used to add a headroom line to the assumptions
    fp32_grads: fp32 gradient buffer (Megatron-LM main_grad) instead of gradients in the weights' dtype
    lm_head: compute vocabulary logits (False for classification heads)
    interleave: virtual pipeline chunks per stage (Megatron interleaved 1F1B)
    context: include the CUDA context in the overhead (False to compare with allocated-tensor peaks)
    """
    spec = load_model(model)
    est = _estimate(spec, cfg, fp32_grads, lm_head, interleave, context)
    if gpu is not None:
        verdict = "fits" if est.fits(gpu) else "does not fit"
        est = replace(est, notes=est.notes + (
            f"{gpu.name}: {gpu.memory_gib:g} GiB usable; {verdict} ({est.headroom_gib(gpu):+.1f} GiB headroom)",))
    return est
