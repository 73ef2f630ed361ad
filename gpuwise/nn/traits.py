"""What each transformer family does beyond what ModelSpec records (positions, activation, norm
placement, dropout, fused QKV), as Hugging Face `transformers` implements the family."""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import InputError
from gpuwise.workload.model_spec import FUSED_GATE_UP, FUSED_QKV, ModelSpec

# Families whose published configs train with dropout 0.1 (hidden and attention probabilities).
DROPOUT = {"gpt2": 0.1, "bert": 0.1, "roberta": 0.1, "t5": 0.1}


@dataclass(frozen=True)
class Traits:
    positions: str          # rotary | learned | alibi | relative (t5 buckets)
    rotary_fraction: float  # share of each head's dims that rotary embeddings rotate
    activation: str         # silu | gelu | gelu_tanh | relu
    post_norm: bool         # BERT-style norm after the residual add
    dropout: float
    fused_qkv: bool
    fused_gate_up: bool = False


# (rotary fraction, activation, post-norm) per family; positions come from ModelSpec.positions
_TRAITS = {
    "llama": (1.0, "silu", False), "mistral": (1.0, "silu", False),
    "mixtral": (1.0, "silu", False), "qwen2": (1.0, "silu", False),
    "qwen3": (1.0, "silu", False), "phi3": (1.0, "silu", False),
    "gemma": (1.0, "gelu_tanh", False), "gemma2": (1.0, "gelu_tanh", False), "gpt2": (0.0, "gelu_tanh", False),
    "gptj": (0.25, "gelu_tanh", False), "gpt_neox": (0.25, "gelu", False),
    "falcon": (1.0, "gelu", False), "bloom": (0.0, "gelu_tanh", False),
    "mpt": (0.0, "gelu", False), "phi": (0.5, "gelu_tanh", False),
    "bert": (0.0, "gelu", True), "roberta": (0.0, "gelu", True),
    "t5": (0.0, "relu", False),
}
FAMILIES = tuple(_TRAITS)


def traits(spec: ModelSpec) -> Traits:
    """The family's traits; InputError (one line) for a family no builder exists for."""
    if spec.family not in _TRAITS or not spec.is_transformer:
        raise InputError("model", spec.name, f"the trace builds transformer families only ({', '.join(FAMILIES)}); "
                         f"{spec.name} is '{spec.family}': use --method analytic")
    rot, act, post = _TRAITS[spec.family]
    if spec.family == "t5" and spec.gated_mlp:
        act = "gelu_tanh"                       # T5 v1.1 / mT5 gated-gelu
    return Traits(spec.positions, rot, act, post, DROPOUT.get(spec.family, 0.0), spec.family in FUSED_QKV,
                  spec.family in FUSED_GATE_UP)
