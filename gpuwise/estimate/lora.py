"""LoRA adapters and 4-bit (NF4) frozen bases.

Adapters go on the target modules (TrainingConfig.lora_targets: q, k, v, o, gate, up, down, comma-
separated, or all-linear). The default, q,v, is where PEFT puts them for Llama-style families (the
query and value projections of every attention block: q_proj/v_proj for llama, mistral, qwen2, gemma,
gptj, phi; q/v for t5, query/value for bert/roberta); a family with a fused QKV matrix (gpt2 c_attn,
bloom/falcon/gpt_neox query_key_value, mpt Wqkv, phi3 qkv_proj) gets one adapter on that matrix whenever q,
k or v is targeted, and phi3's fused gate_up_proj one adapter whenever gate or up is targeted. all-linear
is PEFT's all-linear: every linear layer of every block, not the output layer (head, which can be
added: all-linear,head).
Models without a gated MLP have no gate (their up is the first MLP linear, down the second); MoE
models carry MLP adapters on every expert. A rank-r adapter on a d_in x d_out matrix adds
r (d_in + d_out) parameters.

NF4 (QLoRA, Dettmers et al. 2023, arXiv 2305.14314): 4-bit weights plus double-quantised block
constants, 0.127 bits per parameter, for the linear layers; embeddings, norms and the output
layer stay in 16-bit.
"""

from __future__ import annotations

from functools import lru_cache

from gpuwise.errors import InputError
from gpuwise.workload.model_spec import FUSED_GATE_UP, FUSED_QKV, ModelSpec
from gpuwise.workload.training import LORA_DEFAULT, LORA_MODULES

NF4_BYTES = 0.5 + 0.127 / 8         # 4-bit value + double-quantised constants, per parameter


@lru_cache(maxsize=64)
def lora_modules(targets: str = LORA_DEFAULT) -> frozenset[str]:
    """The canonical module names of a lora_targets value; InputError naming the choices otherwise."""
    names = frozenset(t.strip() for t in str(targets).split(",") if t.strip())
    if "all-linear" in names:
        names = (names - {"all-linear"}) | (frozenset(LORA_MODULES) - {"head"})
    bad = sorted(names - set(LORA_MODULES))
    if bad or not names:
        raise InputError("lora-targets", targets, "use all-linear or module names from " + ",".join(LORA_MODULES)
                         + " separated by commas (default: the stack's, " + LORA_DEFAULT + " for pytorch)")
    return names


def targets_text(targets: str = LORA_DEFAULT) -> str:
    mods = lora_modules(targets)
    what = ",".join(m for m in LORA_MODULES if m in mods)
    return (f"LoRA adapters on {what}" + (" (PEFT's default for Llama-style models)" if targets == LORA_DEFAULT else "")
            + "; a fused QKV matrix (gpt2/bloom/falcon/gpt_neox/mpt/phi3) carries one adapter when q, k or v is "
            "targeted, phi3's fused gate_up one when gate or up is")


def _layer_adapter_shapes(spec: ModelSpec, mods: frozenset[str], tp: int = 1,
                          per_token: bool = False) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(attention, MLP) adapted linears of one layer, each as (d_in, d_out) on one of `tp` tensor-parallel ranks
    (column-parallel q, k, v, gate, up split their output, row-parallel o and down their input; the rank is whole): a
    fused QKV or gate_up matrix carries one adapter when any of its parts is targeted; every routed expert has its
    own MLP (`per_token`: only the experts_per_token experts a token runs)."""
    h, f = spec.hidden, spec.ffn_hidden
    dq, dkv = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    if spec.family in FUSED_QKV:
        attn = [(h, (dq + 2 * dkv) // tp)] if mods & {"q", "k", "v"} else []
    else:
        attn = [(h, d // tp) for m, d in (("q", dq), ("k", dkv), ("v", dkv)) if m in mods]
    attn += [(dq // tp, h)] if "o" in mods else []
    if spec.family in FUSED_GATE_UP:
        mlp = [(h, 2 * f // tp)] if mods & {"gate", "up"} else []
    else:
        mlp = [(h, f // tp) for m in ("gate", "up") if m in mods and (m != "gate" or spec.gated_mlp)]
    mlp += [(f // tp, h)] if "down" in mods else []
    experts = spec.experts_per_token if per_token and spec.n_experts > 1 else spec.n_experts
    return attn, mlp * max(1, experts)


def layer_adapter_shapes(spec: ModelSpec, targets: str = LORA_DEFAULT, tp: int = 1) -> list[tuple[int, int]]:
    """One layer's adapted linears a token passes through, each as (d_in, d_out) on one of `tp` ranks."""
    attn, mlp = _layer_adapter_shapes(spec, lora_modules(targets), tp, per_token=True)
    return attn + mlp


def _layer_adapters(spec: ModelSpec, mods: frozenset[str]) -> tuple[list[int], list[int]]:
    """(attention, MLP) adapted linears of one layer, each as its d_in + d_out."""
    attn, mlp = _layer_adapter_shapes(spec, mods)
    return [a + b for a, b in attn], [a + b for a, b in mlp]


def adapter_shapes(spec: ModelSpec, targets: str = LORA_DEFAULT, tp: int = 1) -> list[tuple[int, int, int]]:
    """The blocks' adapted linears a token passes through, as (d_in, d_out, how many in the model), on one of `tp`
    tensor-parallel ranks: each attention block's, and each MLP's (a mixture's experts_per_token experts)."""
    if not spec.is_transformer:
        return []
    attn, mlp = _layer_adapter_shapes(spec, lora_modules(targets), tp, per_token=True)
    return [(a, b, attention_blocks(spec)) for a, b in attn] + [(a, b, spec.n_encoder_layers + spec.n_layers) for a, b in mlp]


def head_adapter_shape(spec: ModelSpec, targets: str = LORA_DEFAULT, tp: int = 1) -> tuple[int, int] | None:
    """The output layer's adapter as (d_in, d_out) on one of `tp` ranks (vocabulary-parallel), if targeted."""
    return (spec.hidden, spec.vocab_size // tp) if spec.is_transformer and "head" in lora_modules(targets) else None


def adapted_linears(spec: ModelSpec, targets: str = LORA_DEFAULT) -> int:
    """Linear modules of one layer that carry a LoRA adapter (the head's adapter, if targeted, is not a layer's)."""
    attn, mlp = _layer_adapters(spec, lora_modules(targets))
    return len(attn) + len(mlp)


def attention_blocks(spec: ModelSpec) -> int:
    """Attention blocks in the model (t5 decoder layers have self- and cross-attention)."""
    if spec.family == "t5":
        return spec.n_encoder_layers + 2 * spec.n_layers
    return spec.n_layers


def adapter_params(spec: ModelSpec, rank: int, targets: str = LORA_DEFAULT, dora: bool = False) -> int:
    """All LoRA parameters of a model at `rank` (0 -> 0); `dora`: plus DoRA's magnitude, one per adapted output."""
    if rank <= 0 or not spec.is_transformer:
        return 0
    mods = lora_modules(targets)
    mlps = spec.n_encoder_layers + spec.n_layers
    head = (spec.hidden + spec.vocab_size) if "head" in mods else 0
    attn, mlp = _layer_adapters(spec, mods)
    return rank * (attention_blocks(spec) * sum(attn) + mlps * sum(mlp) + head) + (
        dora_magnitudes(spec, targets) if dora else 0)


def dora_magnitudes(spec: ModelSpec, targets: str = LORA_DEFAULT) -> int:
    """DoRA's trainable magnitude vector: one value per output row of every adapted linear."""
    mods = lora_modules(targets)
    attn, mlp = _layer_adapter_shapes(spec, mods)
    head = spec.vocab_size if "head" in mods else 0
    return attention_blocks(spec) * sum(b for _, b in attn) + (spec.n_encoder_layers + spec.n_layers) * sum(
        b for _, b in mlp) + head
