"""Model presets (data under gpuwise/data/models/) and structural parameter counts.

`load_model` accepts a preset name (e.g. "llama-3.1-8b"), the path of a Hugging Face
config.json or a Hugging Face Hub id (e.g. "meta-llama/Llama-3.1-8B", workload.hf_hub). Parameter counts are derived from the structure, family by family, and each preset
records the officially published count it must match (tests hold them to 0.5%).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gpuwise.data import data_path
from gpuwise.errors import InputError, did_you_mean
from gpuwise.workload.hf_config import spec_from_config
from gpuwise.workload.hf_hub import fetch_config, is_repo_id, preset_for
from gpuwise.workload.model_spec import ModelSpec

PRESET_DIR = ("models",)

# Families with biases in the output layer (lm_head) although untied.
_LM_HEAD_BIAS = ("gptj", "phi")
_RELATIVE_BUCKETS = 32  # T5 relative-attention buckets (one table per stack, in its first layer)


@dataclass(frozen=True)
class PresetInfo:
    """What a preset file says about itself besides the structure."""

    name: str
    family: str
    published_params: int | None # the officially published count the structure must match (None: none published)
    published_source: str        # where that count is published


@dataclass(frozen=True)
class ParamCounts:
    """Parameters by where they live (all experts counted unless stated)."""

    embedding: int          # token (+ position, token-type, embedding norm) tables
    lm_head: int            # untied output projection (+ bias); 0 when tied to the embedding
    layer: int              # one decoder (or encoder-only) layer
    layer_active: int       # the same counting only experts_per_token experts (MoE)
    layer_replicated: int   # part of `layer` that tensor parallelism does not split (norms, some biases)
    encoder_layer: int      # one encoder layer of an encoder-decoder model (t5), else 0
    final: int              # final norms, pooler and task heads, relative-position tables
    n_layers: int
    n_encoder_layers: int

    @property
    def total(self) -> int:
        return (self.embedding + self.lm_head + self.final + self.n_layers * self.layer
                + self.n_encoder_layers * self.encoder_layer)

    @property
    def active(self) -> int:
        return (self.embedding + self.lm_head + self.final + self.n_layers * self.layer_active
                + self.n_encoder_layers * self.encoder_layer)


def _norm_params(spec: ModelSpec) -> int:
    if spec.norm == "rmsnorm" or (spec.family == "mpt" and not spec.mlp_bias):
        return spec.hidden                      # weight only
    return 2 * spec.hidden                      # weight + bias


def _attention_params(spec: ModelSpec) -> tuple[int, int]:
    """(matrices, biases) of one attention block."""
    h, dq, dkv = spec.hidden, spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    mats = h * dq + 2 * h * dkv + dq * h
    bias = 0
    if spec.attn_bias:
        bias = dq + 2 * dkv + (0 if spec.family == "qwen2" else h)   # qwen2: no bias on o_proj
    return mats, bias


def _mlp_params(spec: ModelSpec) -> tuple[int, int]:
    """(matrices, biases) of one expert's MLP."""
    h, f = spec.hidden, spec.ffn_hidden
    mats = (3 if spec.gated_mlp else 2) * h * f
    bias = ((2 * f if spec.gated_mlp else f) + h) if spec.mlp_bias else 0
    return mats, bias


def _norms_per_layer(spec: ModelSpec) -> int:
    return spec.norms_per_block     # gptj, phi, falcon-7b style: 1; gemma2: 4 (pre and post each branch)


@lru_cache(maxsize=1024)
def param_counts(spec: ModelSpec) -> ParamCounts:
    """Structural parameter counts of a transformer ModelSpec (explicit models: all in `final`)."""
    if not spec.is_transformer:
        n = int(spec.explicit_params or 0)
        return ParamCounts(0, 0, 0, 0, 0, 0, n, 0, 0)
    h, V = spec.hidden, spec.vocab_size
    norm = _norm_params(spec)
    attn_m, attn_b = _attention_params(spec)
    mlp_m, mlp_b = _mlp_params(spec)
    expert = mlp_m + mlp_b
    router = h * spec.n_experts if spec.n_experts > 1 else 0
    norms = _norms_per_layer(spec) * norm
    # Row-parallel output biases (attention output, MLP down) and norms are replicated under TP.
    replicated = norms + (h if spec.attn_bias and spec.family != "qwen2" else 0) + (h if spec.mlp_bias else 0)

    if spec.family == "t5":
        enc_layer = attn_m + expert + 2 * norm
        layer = 2 * attn_m + expert + 3 * norm          # self-attention + cross-attention
        final = 2 * norm + 2 * _RELATIVE_BUCKETS * spec.n_heads
        embedding = V * h
        return ParamCounts(embedding, 0 if spec.tied_embeddings else V * h, layer, layer, 3 * norm,
                           enc_layer, final, spec.n_layers, spec.n_encoder_layers)

    layer = attn_m + attn_b + spec.n_experts * expert + router + norms
    layer_active = layer - (spec.n_experts - spec.experts_per_token) * expert if spec.n_experts > 1 else layer
    embedding = V * h + (spec.max_seq_len * h if spec.learned_pos_emb else 0)
    final = norm
    if spec.family in ("bert", "roberta"):
        embedding += (2 if spec.family == "bert" else 1) * h + 2 * h     # token types + embedding LayerNorm
        # Pre-training heads: MLM transform (dense + LayerNorm) and decoder bias; BERT adds pooler + NSP.
        final = (h * h + h) + 2 * h + V
        if spec.family == "bert":
            final += (h * h + h) + (2 * h + 2)
    elif spec.family == "bloom":
        embedding += 2 * h                                                # word_embeddings_layernorm
    lm_head = 0 if spec.tied_embeddings else V * h + (V if spec.family in _LM_HEAD_BIAS else 0)
    return ParamCounts(embedding, lm_head, layer, layer_active, replicated, 0, final, spec.n_layers, 0)


def param_count(spec: ModelSpec) -> int:
    """All parameters (MoE: all experts)."""
    if spec.explicit_params is not None:
        return int(spec.explicit_params)
    return param_counts(spec).total


def active_param_count(spec: ModelSpec) -> int:
    """Parameters used per token (MoE: experts_per_token experts; dense: all)."""
    if spec.explicit_params is not None:
        return int(spec.explicit_params)
    return param_counts(spec).active


# ---------------------------------------------------------------- presets and loading

@lru_cache(maxsize=1)
def _preset_files() -> dict[str, Path]:
    folder = data_path(*PRESET_DIR)
    return {p.stem: p for p in sorted(folder.glob("*.json"))}


def list_presets() -> list[str]:
    """Names of the bundled model presets."""
    return list(_preset_files())


@lru_cache(maxsize=256)        # bounded: keyed by path spelling (the presets are 50)
def _read_json(path: str) -> dict:
    from gpuwise.user_files import read_text

    text = read_text(path, "model", "Hugging Face config.json")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("model", path, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None


# what an unknown model name is told when no preset is a plausible match
NO_PRESET = ("no such preset (gpuwise models lists them); give the path of its Hugging Face config.json "
             "(model: path/to/config.json), or its numbers in a job spec (model: {name, params, "
             "flops_per_sample}; gpuwise spec shows every field)")


def _unknown_preset(name: str, files) -> InputError:
    """No such preset: how to give the model, and the closest plausible preset names when there are any (a
    same-sized preset of another generation, qwen-72b for qwen2.5-72b, may be a typo or another model)."""
    hint = did_you_mean(name, files, otherwise=NO_PRESET)
    return InputError("model", name, NO_PRESET if hint == NO_PRESET else f"{NO_PRESET}; {hint}")


@lru_cache(maxsize=None)
def preset_info(name: str) -> PresetInfo:
    """The published parameter count and its source for a preset."""
    files = _preset_files()
    if name not in files:
        raise _unknown_preset(name, files)
    cfg = _read_json(str(files[name]))
    meta = cfg.get("gpuwise", {})
    published = meta["published_params"]
    return PresetInfo(name, cfg.get("model_type", ""), None if published is None else int(published),
                      meta["published_source"])


@lru_cache(maxsize=256)
def _load_cached(name_or_path: str) -> ModelSpec:
    files = _preset_files()
    key = name_or_path.strip()
    lowered = key.lower()
    if lowered in files:
        path, name = files[lowered], lowered
    elif not Path(key).exists() and is_repo_id(key):
        return _from_hub(key)
    elif key.endswith(".json") or "/" in key or Path(key).is_file():
        path = Path(key)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise InputError("model", name_or_path, "no such config.json; give a preset name (gpuwise models), "
                             "the path of a Hugging Face config.json or a Hub id (owner/name)")
        name = path.parent.name if path.name == "config.json" else path.stem
    else:
        raise _unknown_preset(name_or_path, files)
    cfg = _read_json(str(path))
    spec = spec_from_config(cfg, name, where=str(path) if path.parent != data_path(*PRESET_DIR) else name)
    source = (cfg.get("gpuwise") or {}).get("published_source", "") or spec.source or str(path)
    return spec if spec.source else _with_source(spec, source)


def _from_hub(repo_id: str) -> ModelSpec:
    """A Hub id: its bundled preset when listed (no download) or when the fetched config.json has a
    preset's architecture; else the model built from that config.json."""
    listed = preset_for(repo_id)
    if listed:
        return _as_preset(repo_id, listed, "listed in gpuwise/data/hf_model_ids.csv")
    path = fetch_config(repo_id)
    spec = spec_from_config(_read_json(str(path)), repo_id, where=f"{repo_id} config.json")
    for name in _preset_files():
        if _same_architecture(spec, _load_cached(name)):
            return _as_preset(repo_id, name, "its config.json has the preset's architecture")
    return _with_source(spec, f"{repo_id} config.json from the Hugging Face Hub (cached at {path.parent})")


def _as_preset(repo_id: str, preset: str, why: str) -> ModelSpec:
    spec = _load_cached(preset)
    return _with_source(spec, f"Hugging Face {repo_id} = bundled preset {preset} ({why}); {spec.source}")


def _same_architecture(a: ModelSpec, b: ModelSpec) -> bool:
    """Every structural field equal, the position table included (the name and source may differ)."""
    from dataclasses import fields

    skip = ("name", "source")
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.name not in skip)


def _with_source(spec: ModelSpec, source: str) -> ModelSpec:
    from dataclasses import replace

    return replace(spec, source=source)


def for_seq_len(spec: ModelSpec, seq_len: int) -> ModelSpec:
    """The model a run of `seq_len` tokens builds: a position table sized per run (ModelSpec.positions_per_run)
    gets `seq_len` rows; any other model is returned as it is."""
    from dataclasses import replace

    if spec.positions_per_run and seq_len and seq_len != spec.max_seq_len:
        return replace(spec, max_seq_len=int(seq_len))
    return spec


def positions_note(spec: ModelSpec) -> tuple[str, ...]:
    """The assumption line of a position table sized per run (none for any other model)."""
    if not spec.positions_per_run:
        return ()
    return (f"learned position table sized to the run: {spec.max_seq_len} rows x {spec.hidden} (the architecture is "
            "trained from scratch with max_seq_len = the run's sequence length)",)


def load_model(name_or_path: str | ModelSpec) -> ModelSpec:
    """Preset name (case-insensitive), path to a config.json (or a folder holding one) or a Hub id.

    Unknown names raise InputError with the closest preset names; a malformed config.json
    raises InputError naming the missing field."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    key = str(name_or_path).strip()
    return _load_cached(key.lower() if key.lower() in _preset_files() else key)
