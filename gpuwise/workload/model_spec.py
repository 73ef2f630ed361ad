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
# parallel-residual families with one norm in front of both branches (falcon-7b too: falcon with one KV head)
SINGLE_NORM_PARALLEL = ("gptj", "phi")
# families that multiply the token embeddings by sqrt(hidden) (Hugging Face Gemma/Gemma2 `normalizer`)
SCALED_EMBEDDINGS = ("gemma", "gemma2")


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
    positions_per_run: bool = False     # that table has as many rows as each run's sequence length (an architecture
    #                                     trained from scratch, e.g. llm-foundry's MPT pretraining YAMLs, whose
    #                                     model.max_seq_len is the run's max_seq_len); False: fixed at max_seq_len
    #                                     (a checkpoint's table), longer sequences refused
    n_experts: int = 1                  # MoE experts per layer (1 = dense)
    experts_per_token: int = 1          # top-k routing
    n_encoder_layers: int = 0           # encoder-decoder models (t5): encoder depth
    parallel_attn_mlp: bool = False     # falcon/gptj/neox style parallel residual
    # --- Gemma 2 (transformers models/gemma2, litgpt Config post_attention_norm / post_mlp_norm) ---
    post_norms: bool = False            # a second RMSNorm on each branch's output before the residual add
    #                                     (post_attention_layernorm, post_feedforward_layernorm): 4 norms a block
    attn_softcap: float = 0.0           # attention-logit soft-capping: scores = tanh(scores / cap) * cap (0: none)
    final_softcap: float = 0.0          # final-logit soft-capping on the output layer's logits (0: none)
    sliding_window: int = 0             # window of the local-attention layers (0: every layer global)
    sliding_every: int = 0              # every sliding_every-th layer, from layer 0, is local (gemma2: 2, the even
    #                                     layers); under eager attention and SDPA with a mask the scores stay s x s
    query_scale_dim: int = 0            # scores scaled by query_scale_dim ** -0.5 (gemma2 query_pre_attn_scalar;
    #                                     0: head_dim)
    # --- explicit numbers (non-transformers, or overrides) ---
    explicit_params: int | None = None
    activation_bytes_per_sample: float | None = None   # at the precision stated in `source`
    flops_per_sample: float | None = None              # forward FLOPs per sample
    sample_unit: str = "token"          # "token" for LMs, "sample" for images etc.
    source: str = ""                    # where the structure/numbers come from

    # the kept hash lives in a slot, not in __dict__: `ModelSpec(**spec.__dict__)` and vars(spec) hold the fields only
    __slots__ = ("_hash", "__dict__", "__weakref__")

    def __hash__(self) -> int:
        """The hash of the fields (as the dataclass's own), kept after the first call: the estimates' memos hash
        the model ~10^4 times per plan. Never pickled or copied (`__getstate__`: the fields only): a string's hash
        differs between processes."""
        try:
            return self._hash
        except AttributeError:
            h = hash(tuple(getattr(self, name) for name in _FIELDS))
            object.__setattr__(self, "_hash", h)
            return h

    def __getstate__(self) -> dict:
        return self.__dict__

    @property
    def is_transformer(self) -> bool:
        return self.n_layers > 0 and self.hidden > 0

    @property
    def norms_per_block(self) -> int:
        """Norms in one decoder block: one for single-norm parallel blocks (gptj, phi, falcon-7b), else two,
        plus the two post-branch norms of Gemma 2's blocks."""
        single = self.parallel_attn_mlp and (self.family in SINGLE_NORM_PARALLEL
                                             or (self.family == "falcon" and self.n_kv_heads == 1))
        return (1 if single else 2) + (2 if self.post_norms else 0)

    def is_sliding(self, layer: int) -> bool:
        """True if decoder layer `layer` (0-based) attends within sliding_window only."""
        return self.sliding_window > 0 and self.sliding_every > 0 and layer % self.sliding_every == 0

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


_FIELDS = tuple(ModelSpec.__dataclass_fields__)
