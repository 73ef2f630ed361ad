"""Hugging Face `config.json` -> ModelSpec, one small reader per model family.

Each reader maps the family's own key names onto the structural fields of ModelSpec and applies
the family's defaults as Hugging Face `transformers` declares them (e.g. llama: untied, no biases;
gpt2: tied, biases everywhere). A key that a family needs and the file lacks raises an InputError
that names the key, so a truncated or foreign config.json is reported, not silently guessed.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Callable

from gpuwise.errors import InputError
from gpuwise.workload.model_spec import ModelSpec

Config = dict[str, Any]


class _Reader:
    """Key access with the file name in every error."""

    def __init__(self, cfg: Config, where: str):
        self.cfg, self.where = cfg, where

    def need(self, *keys: str) -> Any:
        """First present key among aliases; InputError naming the first alias if none is."""
        for k in keys:
            if self.cfg.get(k) is not None:
                return self.cfg[k]
        raise InputError(f"{self.where}: {keys[0]}", None,
                         f"config.json lacks required field '{keys[0]}'"
                         + (f" (or {', '.join(keys[1:])})" if len(keys) > 1 else "")
                         + f" for model_type {self.cfg.get('model_type')!r}")

    def get(self, key: str, default: Any) -> Any:
        v = self.cfg.get(key)
        return default if v is None else v

    def int(self, *keys: str) -> int:
        v = self.need(*keys)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v <= 0:
            raise InputError(f"{self.where}: {keys[0]}", v, "must be a positive integer")
        return int(v)


def _llama_like(r: _Reader, name: str, family: str) -> ModelSpec:
    """llama 1/2/3/3.1, mistral, mixtral, qwen2, qwen3, phi3, gemma: RMSNorm, gated MLP, rotary, GQA.
    phi3 is llama's structure with q/k/v fused into qkv_proj and gate/up into gate_up_proj (the same
    weights, counted alike); qwen3 adds an RMSNorm over each q and k head (2 x head_dim weights per
    layer, not a ModelSpec field: neither their weights (0.0001% of Qwen3-8B) nor the norms' saved activations
    and ops are modelled, which the host-op count says) and states head_dim."""
    h = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    kv = int(r.get("num_key_value_heads", heads))
    tie_default = family in ("gemma", "gemma2")     # Gemma(2)Config ties by default; the others do not
    qkv_bias = bool(r.get("attention_bias", family == "qwen2"))   # qwen2: biases on q/k/v
    return ModelSpec(
        name=name, family=family, n_layers=r.int("num_hidden_layers"), hidden=h, n_heads=heads,
        n_kv_heads=kv, head_dim=int(r.get("head_dim", h // heads)), ffn_hidden=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"), max_seq_len=int(r.get("max_position_embeddings", 4096)),
        gated_mlp=True, tied_embeddings=bool(r.get("tie_word_embeddings", tie_default)),
        attn_bias=qkv_bias, mlp_bias=bool(r.get("mlp_bias", False)), norm="rmsnorm",
        n_experts=int(r.get("num_local_experts", 1)), experts_per_token=int(r.get("num_experts_per_tok", 1)),
    )


def _gemma2(r: _Reader, name: str, family: str) -> ModelSpec:
    """gemma2 (transformers models/gemma2, Gemma2Config defaults): llama's structure (GeGLU MLP, RMSNorm, rotary,
    GQA, head_dim stated, tied embeddings by default) plus an RMSNorm after attention and after the MLP
    (post_attention_layernorm, post_feedforward_layernorm), tanh soft-capping of the attention scores
    (attn_logit_softcapping, default 50.0) and of the final logits (final_logit_softcapping, default 30.0),
    sliding-window attention (sliding_window, default 4096) on the even layers (Gemma2Attention: layer_idx % 2 == 0)
    and scores scaled by query_pre_attn_scalar ** -0.5 (default 256). A null softcap in the file means none."""
    base = _llama_like(r, name, family)
    return replace(base, post_norms=True, head_dim=int(r.get("head_dim", 256)),
                   attn_softcap=float(r.cfg.get("attn_logit_softcapping", 50.0) or 0.0),
                   final_softcap=float(r.cfg.get("final_logit_softcapping", 30.0) or 0.0),
                   sliding_window=int(r.cfg.get("sliding_window", 4096) or 0), sliding_every=2,
                   query_scale_dim=int(r.get("query_pre_attn_scalar", 256)))


def _gpt2_keys(r: _Reader, name: str, family: str, *, positions: int, tied: bool, attn_bias: bool,
               learned_pos_emb: bool = False, parallel: bool = False) -> ModelSpec:
    """gpt2 and gptj: GPT-2 key names (n_embd, n_head, n_layer, n_inner, n_positions), full MHA, MLP biases."""
    h = r.int("n_embd", "hidden_size")
    heads = r.int("n_head", "num_attention_heads")
    return ModelSpec(
        name=name, family=family, n_layers=r.int("n_layer", "num_hidden_layers"), hidden=h, n_heads=heads,
        n_kv_heads=heads, head_dim=h // heads, ffn_hidden=int(r.get("n_inner", 4 * h)),
        vocab_size=r.int("vocab_size"), max_seq_len=int(r.get("n_positions", positions)),
        tied_embeddings=bool(r.get("tie_word_embeddings", tied)), attn_bias=attn_bias, mlp_bias=True,
        learned_pos_emb=learned_pos_emb, parallel_attn_mlp=parallel)


# gpt2: tied, biases everywhere, learned positions; gptj: untied, no attention biases, rotary, parallel residual
_gpt2 = partial(_gpt2_keys, positions=1024, tied=True, attn_bias=True, learned_pos_emb=True)
_gptj = partial(_gpt2_keys, positions=2048, tied=False, attn_bias=False, parallel=True)


def _gpt_neox(r: _Reader, name: str, family: str) -> ModelSpec:
    h = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    return ModelSpec(
        name=name, family="gpt_neox", n_layers=r.int("num_hidden_layers"), hidden=h, n_heads=heads,
        n_kv_heads=heads, head_dim=h // heads, ffn_hidden=int(r.get("intermediate_size", 4 * h)),
        vocab_size=r.int("vocab_size"), max_seq_len=int(r.get("max_position_embeddings", 2048)),
        tied_embeddings=bool(r.get("tie_word_embeddings", False)), attn_bias=bool(r.get("attention_bias", True)),
        mlp_bias=True, parallel_attn_mlp=bool(r.get("use_parallel_residual", True)))


def _falcon(r: _Reader, name: str, family: str) -> ModelSpec:
    h = r.int("hidden_size", "n_embed")
    heads = r.int("num_attention_heads", "n_head")
    # legacy "RefinedWeb" configs (falcon-40b/180b) are the new decoder architecture
    new_arch = bool(r.get("new_decoder_architecture", r.cfg.get("model_type") == "RefinedWeb"))
    if new_arch:
        kv = int(r.get("num_kv_heads", r.get("n_head_kv", heads)))
    else:
        kv = 1 if r.get("multi_query", True) else heads
    bias = bool(r.get("bias", False))
    return ModelSpec(
        name=name, family="falcon", n_layers=r.int("num_hidden_layers", "n_layer"), hidden=h, n_heads=heads,
        n_kv_heads=kv, head_dim=h // heads, ffn_hidden=int(r.get("ffn_hidden_size", 4 * h)),
        vocab_size=r.int("vocab_size"), max_seq_len=int(r.get("max_position_embeddings", 2048)),
        tied_embeddings=bool(r.get("tie_word_embeddings", False)), attn_bias=bias, mlp_bias=bias,
        parallel_attn_mlp=bool(r.get("parallel_attn", True)))


def _mpt(r: _Reader, name: str, family: str) -> ModelSpec:
    h = r.int("d_model")
    heads = r.int("n_heads")
    attn = r.get("attn_config", {}) or {}
    kv = int(attn.get("kv_n_heads", heads)) if attn.get("attn_type") == "grouped_query_attention" else heads
    bias = not bool(r.get("no_bias", True))
    # llm-foundry's MPTConfig: a learned position table unless ALiBi replaces it (the HF mpt-7b/30b configs)
    learned = bool(r.get("learned_pos_emb", True)) and not bool(attn.get("alibi", False))
    return ModelSpec(
        name=name, family="mpt", n_layers=r.int("n_layers"), hidden=h, n_heads=heads, n_kv_heads=kv,
        head_dim=h // heads, ffn_hidden=int(r.get("expansion_ratio", 4) * h), vocab_size=r.int("vocab_size"),
        max_seq_len=int(r.get("max_seq_len", 2048)), tied_embeddings=bool(r.get("tie_word_embeddings", True)),
        attn_bias=bias, mlp_bias=bias, learned_pos_emb=learned)


def _bloom(r: _Reader, name: str, family: str) -> ModelSpec:
    h = r.int("hidden_size", "n_embed")
    heads = r.int("n_head", "num_attention_heads")
    return ModelSpec(
        name=name, family="bloom", n_layers=r.int("n_layer", "num_hidden_layers"), hidden=h, n_heads=heads,
        n_kv_heads=heads, head_dim=h // heads, ffn_hidden=4 * h, vocab_size=r.int("vocab_size"),
        max_seq_len=int(r.get("seq_length", 2048)), tied_embeddings=True, attn_bias=True, mlp_bias=True)


def _phi(r: _Reader, name: str, family: str) -> ModelSpec:
    h = r.int("hidden_size", "n_embd")
    heads = r.int("num_attention_heads", "n_head")
    return ModelSpec(
        name=name, family="phi", n_layers=r.int("num_hidden_layers", "n_layer"), hidden=h, n_heads=heads,
        n_kv_heads=int(r.get("num_key_value_heads", heads)), head_dim=h // heads,
        ffn_hidden=int(r.get("intermediate_size", r.get("n_inner", 4 * h))), vocab_size=r.int("vocab_size"),
        max_seq_len=int(r.get("max_position_embeddings", r.get("n_positions", 2048))),
        tied_embeddings=bool(r.get("tie_word_embeddings", False)), attn_bias=True, mlp_bias=True,
        parallel_attn_mlp=True)


def _bert(r: _Reader, name: str, family: str) -> ModelSpec:
    h = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    return ModelSpec(
        name=name, family=family, n_layers=r.int("num_hidden_layers"), hidden=h, n_heads=heads,
        n_kv_heads=heads, head_dim=h // heads, ffn_hidden=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"), max_seq_len=r.int("max_position_embeddings"),
        tied_embeddings=True, attn_bias=True, mlp_bias=True, learned_pos_emb=True)


def _t5(r: _Reader, name: str, family: str) -> ModelSpec:
    d = r.int("d_model")
    enc = r.int("num_layers")
    gated = str(r.get("feed_forward_proj", "relu")).startswith("gated")
    return ModelSpec(
        name=name, family="t5", n_layers=int(r.get("num_decoder_layers", enc)), hidden=d,
        n_heads=r.int("num_heads"), n_kv_heads=r.int("num_heads"), head_dim=r.int("d_kv"), ffn_hidden=r.int("d_ff"),
        vocab_size=r.int("vocab_size"), max_seq_len=int(r.get("n_positions", 512)), gated_mlp=gated,
        tied_embeddings=bool(r.get("tie_word_embeddings", True)), norm="rmsnorm", n_encoder_layers=enc)


def _explicit(r: _Reader, name: str, family: str) -> ModelSpec:
    act = r.need("activation_bytes_per_sample")
    return ModelSpec(
        name=name, family="explicit", explicit_params=r.int("params"), activation_bytes_per_sample=float(act),
        flops_per_sample=float(r.get("flops_per_sample", 0.0)) or None, sample_unit=str(r.get("sample_unit", "sample")),
        source=str(r.get("activation_derivation", "")))


READERS: dict[str, Callable[[_Reader, str, str], ModelSpec]] = {
    "llama": _llama_like, "mistral": _llama_like, "mixtral": _llama_like, "qwen2": _llama_like,
    "qwen3": _llama_like, "phi3": _llama_like, "gemma": _llama_like, "gemma2": _gemma2, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "gptj": _gptj, "falcon": _falcon,
    "RefinedWeb": _falcon, "RefinedWebModel": _falcon, "mpt": _mpt, "bloom": _bloom, "phi": _phi,
    "phi-msft": _phi, "bert": _bert, "roberta": _bert, "t5": _t5, "mt5": _t5, "explicit": _explicit,
}


def spec_from_config(cfg: Config, name: str, where: str = "config.json") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json (dict). `where` names the file in errors."""
    if not isinstance(cfg, dict):
        raise InputError(where, type(cfg).__name__, "config.json must hold a JSON object")
    r = _Reader(cfg, where)
    mt = r.need("model_type")
    if mt not in READERS:
        from gpuwise.errors import did_you_mean

        raise InputError(f"{where}: model_type", mt, "supported families: " + ", ".join(sorted(READERS))
                         + "; " + did_you_mean(str(mt), READERS))
    family = {"RefinedWeb": "falcon", "RefinedWebModel": "falcon", "phi-msft": "phi", "mt5": "t5"}.get(mt, mt)
    spec = READERS[mt](r, name, family)
    if spec.learned_pos_emb and (cfg.get("gpuwise") or {}).get("positions_per_run"):
        from dataclasses import replace

        spec = replace(spec, positions_per_run=True)
    if spec.is_transformer:
        if spec.n_heads % max(spec.n_kv_heads, 1):
            raise InputError(f"{where}: num_key_value_heads", spec.n_kv_heads, "must divide num_attention_heads")
    return spec
