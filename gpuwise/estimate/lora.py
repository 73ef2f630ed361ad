"""LoRA adapters and 4-bit (NF4) frozen bases.

Adapters go where PEFT puts them by default for each family: the query and value projections of
every attention block (q_proj/v_proj for llama, mistral, qwen2, gemma, gptj, phi; q/v for t5,
query/value for bert/roberta), or the fused QKV matrix where a family has one (gpt2 c_attn,
bloom/falcon/gpt_neox query_key_value, mpt Wqkv). A rank-r adapter on a d_in x d_out matrix
adds r (d_in + d_out) parameters.

NF4 (QLoRA, Dettmers et al. 2023, arXiv 2305.14314): 4-bit weights plus double-quantised block
constants, 0.127 bits per parameter, for the linear layers; embeddings, norms and the output
layer stay in 16-bit.
"""

from __future__ import annotations

from gpuwise.workload.model_spec import ModelSpec

FUSED_QKV = ("gpt2", "bloom", "falcon", "gpt_neox", "mpt")
NF4_BYTES = 0.5 + 0.127 / 8         # 4-bit value + double-quantised constants, per parameter
TARGETS_TEXT = ("LoRA adapters on the query and value projections of every attention block "
                "(PEFT defaults; fused QKV matrix for gpt2/bloom/falcon/gpt_neox/mpt)")


def adapter_params_per_block(spec: ModelSpec, rank: int) -> int:
    """Adapter parameters of one attention block."""
    h, dq, dkv = spec.hidden, spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    if spec.family in FUSED_QKV:
        return rank * (h + dq + 2 * dkv)
    return rank * (h + dq) + rank * (h + dkv)


def attention_blocks(spec: ModelSpec) -> int:
    """Attention blocks in the model (t5 decoder layers have self- and cross-attention)."""
    if spec.family == "t5":
        return spec.n_encoder_layers + 2 * spec.n_layers
    return spec.n_layers


def adapter_params(spec: ModelSpec, rank: int) -> int:
    """All LoRA parameters of a model at `rank` (0 -> 0)."""
    if rank <= 0 or not spec.is_transformer:
        return 0
    return attention_blocks(spec) * adapter_params_per_block(spec, rank)
