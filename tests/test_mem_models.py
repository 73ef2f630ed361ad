"""Model presets and config.json parsing.

Each transformer preset's structural parameter count must be within 0.5% of the officially
published count recorded in its preset file (model cards / HF Hub safetensors metadata / papers,
source named in the file's `gpuwise.published_source`).
"""

from __future__ import annotations

import json

import pytest

from gpuwise.errors import InputError
from gpuwise.workload.models import (active_param_count, list_presets, load_model, param_count,
                                     preset_info)

REQUIRED = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
            "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl",
            "bert-base", "bert-large", "t5-base", "t5-3b", "phi-1.5", "mpt-7b", "mpt-30b", "falcon-40b",
            "bloom-7b1", "resnet50", "resnet18-cifar10", "yolov3", "deepspeech2", "ncf"]


def test_required_presets_present():
    assert set(REQUIRED) <= set(list_presets())


@pytest.mark.parametrize("name", sorted(list_presets()))
def test_preset_param_count_within_half_percent_of_published(name):
    spec = load_model(name)
    info = preset_info(name)
    assert info.published_source
    if info.published_params is None:      # architecture-only presets (llm-foundry MPT sizes): source says so
        assert "no exact parameter count is published" in info.published_source
        return
    rel = abs(param_count(spec) / info.published_params - 1)
    assert rel <= 0.005, f"{name}: {param_count(spec):,} vs published {info.published_params:,}"


def test_exact_counts_published_to_the_parameter():
    # BLOOM model cards and the GPT-NeoX-20B paper publish exact counts: the structure must match exactly.
    assert param_count(load_model("bloom-7b1")) == 7_069_016_064
    assert param_count(load_model("bloom")) == 176_247_271_424
    assert param_count(load_model("gpt-neox-20b")) == 20_554_567_680


def test_structure_features():
    llama = load_model("llama-3.1-8b")
    assert (llama.n_kv_heads, llama.gated_mlp, llama.tied_embeddings, llama.norm) == (8, True, False, "rmsnorm")
    assert load_model("gpt2").tied_embeddings and load_model("gpt2").learned_pos_emb
    assert load_model("qwen2.5-7b").attn_bias
    assert load_model("t5-3b").n_encoder_layers == 24 and load_model("t5-3b").head_dim == 128
    assert load_model("gemma-7b").head_dim == 256
    phi3, qwen3 = load_model("phi-3-mini-4k-instruct"), load_model("qwen3-8b")
    assert (phi3.family, phi3.n_kv_heads, phi3.gated_mlp, phi3.attn_bias, phi3.tied_embeddings) == ("phi3", 32, True,
                                                                                                   False, False)
    assert (qwen3.family, qwen3.head_dim, qwen3.n_kv_heads, qwen3.attn_bias, qwen3.norm) == ("qwen3", 128, 8, False,
                                                                                             "rmsnorm")
    assert load_model("stablelm-base-alpha-3b").parallel_attn_mlp and load_model("llama-3.2-3b").tied_embeddings


def test_mixtral_active_params():
    # Mixtral paper (arXiv 2401.04088): 13B active parameters per token (12.9B on the HF model card).
    spec = load_model("mixtral-8x7b")
    assert abs(active_param_count(spec) / 12.9e9 - 1) < 0.005
    assert param_count(spec) > 3 * active_param_count(spec)


def test_case_insensitive_and_cached():
    assert load_model("LLaMA-3.1-8B") is load_model("llama-3.1-8b")


def test_explicit_presets():
    r50 = load_model("resnet50")
    assert r50.family == "explicit" and not r50.is_transformer
    assert r50.explicit_params == 25_557_032 and r50.activation_bytes_per_sample > 0


def test_unknown_model_suggests_closest():
    with pytest.raises(InputError) as e:
        load_model("llama-3.1-7b")
    assert "llama-3.1-8b" in str(e.value)


def test_config_json_path(tmp_path):
    cfg = json.loads(open(__import__("gpuwise.data", fromlist=["data_path"]).data_path(
        "models", "mistral-7b.json")).read())
    cfg.pop("gpuwise")
    d = tmp_path / "my-mistral"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    spec = load_model(str(d / "config.json"))
    assert spec.name == "my-mistral" and param_count(spec) == param_count(load_model("mistral-7b"))
    assert load_model(str(d)).hidden == 4096          # a folder holding config.json


def test_malformed_config_names_missing_field(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}))
    with pytest.raises(InputError) as e:
        load_model(str(p))
    assert "num_hidden_layers" in str(e.value)
    p2 = tmp_path / "bad.json"
    p2.write_text(json.dumps({"hidden_size": 4096}))
    with pytest.raises(InputError) as e:
        load_model(str(p2))
    assert "model_type" in str(e.value)
    p3 = tmp_path / "odd.json"
    p3.write_text(json.dumps({"model_type": "lama"}))
    with pytest.raises(InputError) as e:
        load_model(str(p3))
    assert "llama" in str(e.value)
    p4 = tmp_path / "broken.json"
    p4.write_text("{not json")
    with pytest.raises(InputError):
        load_model(str(p4))
    with pytest.raises(InputError):
        load_model(str(tmp_path / "missing" / "config.json"))


@pytest.mark.parametrize("cfg,expected", [
    # legacy falcon-40b config (model_type RefinedWeb, n_* keys) == the falcon-40b preset
    ({"model_type": "RefinedWeb", "hidden_size": 8192, "n_layer": 60, "n_head": 128, "n_head_kv": 8,
      "vocab_size": 65024, "parallel_attn": True, "bias": False}, "falcon-40b"),
    # legacy phi-1.5 config (model_type phi-msft, GPT-2 style keys)
    ({"model_type": "phi-msft", "n_embd": 2048, "n_layer": 24, "n_head": 32, "n_inner": None, "vocab_size": 51200,
      "n_positions": 2048}, "phi-1.5"),
    # mT5 / T5 v1.1 (gated-gelu, untied)
    ({"model_type": "mt5", "d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24,
      "vocab_size": 250112, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}, "mt0-xxl"),
])
def test_legacy_and_variant_configs(tmp_path, cfg, expected):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert param_count(load_model(str(p))) == param_count(load_model(expected))
