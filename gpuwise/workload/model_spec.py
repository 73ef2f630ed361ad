"""The typed description of a model, whatever it was read from (preset, config.json, numbers).

Transformers are described structurally so that parameter counts, FLOPs and activation memory
can be derived; other models (e.g. ResNet-50) by explicit numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

# families whose attention projects q, k and v with one matrix (one LoRA adapter, one autocast cast, one module in
# gpuwise.nn): gpt2 c_attn, bloom/falcon/gpt_neox query_key_value, mpt Wqkv, phi3 qkv_proj
FUSED_QKV = ("gpt2", "bloom", "falcon", "gpt_neox", "mpt", "phi3")
FUSED_GATE_UP = ("phi3",)       # Hugging Face's Phi-3: gate and up are one gate_up_proj matrix


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str                         # "llama", "gpt2", "t5", ..., or "explicit"
    # --- transformer structure (0 / None for explicit models) ---
    n_layers: int = 0                   # decoder (or encoder-only) layers
    hidden: int = 0                     # model width d
    n_heads: int = 0                    # query heads
    n_kv_heads: int = 0                 # key/value heads (GQA/MQA); == n_heads for MHA
    head_dim: int = 0                   # usually hidden // n_heads (gemma differs)
    ffn_hidden: int = 0                 # MLP inner width (per expert for MoE)
    vocab_size: int = 0
    max_seq_len: int = 0
    gated_mlp: bool = False             # SwiGLU/GeGLU: three matrices instead of two
    tied_embeddings: bool = False
    attn_bias: bool = False             # biases on q/k/v/o projections
    mlp_bias: bool = False
    norm: str = "layernorm"             # "layernorm" (weight+bias) | "rmsnorm" (weight only)
    learned_pos_emb: bool = False       # absolute learned position table (gpt2, bert, opt)
    n_experts: int = 1                  # MoE experts per layer (1 = dense)
    experts_per_token: int = 1          # top-k routing
    n_encoder_layers: int = 0           # encoder-decoder models (t5): encoder depth
    parallel_attn_mlp: bool = False     # falcon/gptj/neox style parallel residual
    # --- explicit numbers (non-transformers, or overrides) ---
    explicit_params: int | None = None
    activation_bytes_per_sample: float | None = None   # at the precision stated in `source`
    flops_per_sample: float | None = None              # forward FLOPs per sample
    sample_unit: str = "token"          # "token" for LMs, "sample" for images etc.
    source: str = ""                    # where the structure/numbers come from

    @property
    def is_transformer(self) -> bool:
        return self.n_layers > 0 and self.hidden > 0

    @property
    def positions(self) -> str:
        """How tokens get their position: a learned table, rotary embeddings, an ALiBi bias inside the
        attention kernel (bloom; mpt unless its config asks for a table) or T5's relative buckets. Read by
        the PyTorch models (gpuwise.nn) and the step-time inventory alike."""
        if self.learned_pos_emb:
            return "learned"
        if self.family == "t5":
            return "relative"
        return "alibi" if self.family in ("bloom", "mpt") else "rotary"
