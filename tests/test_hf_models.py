"""Hugging Face Hub model ids wherever a model is named (memory, estimate, fit-gpus, job specs).

No network: listed ids are bundled presets; other ids are read from a Hugging Face cache folder the test
writes in the layout huggingface_hub reads (models--owner--name/refs/main -> snapshots/<commit>/config.json),
checked with huggingface_hub's own try_to_load_from_cache. Qwen2.5-1.5B's structure (its config.json
values; no bundled preset has it) must give its published 1,543,714,304 parameters (HF Hub safetensors);
Qwen2.5-0.5B's config.json is the bundled preset qwen2.5-0.5b."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.workload.models import load_model, param_count

hub = pytest.importorskip("huggingface_hub")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
QWEN_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
            "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
            "tie_word_embeddings": True, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16"}
QWEN_15B = {**QWEN_05B, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
            "num_attention_heads": 12, "max_position_embeddings": 131072}
ROOT = Path(__file__).resolve().parents[1]


def cache_config(hub_cache: Path, repo_id: str, config: dict) -> Path:
    """Write config.json into a Hugging Face hub cache as huggingface_hub lays it out."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    (snap / "config.json").write_text(json.dumps(config))
    assert hub.try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache) == str(snap / "config.json")
    return snap / "config.json"


def run_cli(env_extra: dict, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    return subprocess.run([sys.executable, "-m", "gpuwise", *argv], capture_output=True, text=True, env=env,
                          timeout=120)


def test_listed_id_is_the_preset_without_download(capsys):
    spec = load_model("meta-llama/Llama-3.1-8B")
    assert param_count(spec) == 8_030_261_248 and spec.name == "llama-3.1-8b"
    assert "bundled preset llama-3.1-8b" in spec.source and "hf_model_ids.csv" in spec.source
    assert load_model("META-LLAMA/llama-3.1-8b-instruct").n_layers == 32     # ids match case-insensitively
    assert main(["memory", "meta-llama/Llama-3.1-8B", "--gpus", "8", "--zero", "3", "--json"]) == 0
    by_id = json.loads(capsys.readouterr().out)
    assert main(["memory", "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--json"]) == 0
    assert by_id["per_gpu_gib"] == json.loads(capsys.readouterr().out)["per_gpu_gib"]
    assert any("meta-llama/Llama-3.1-8B = bundled preset" in a for a in by_id["assumptions"])


def test_cached_config_offline_respects_hf_home(tmp_path):
    cache_config(tmp_path / "hub", "Qwen/Qwen2.5-1.5B", QWEN_15B)
    r = run_cli({"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}, "memory", "Qwen/Qwen2.5-1.5B",
                "--gpu", "RTX-6000-Ada", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["model"] == "Qwen/Qwen2.5-1.5B" and out["params"] == 1_543_714_304
    assert out["fits"] == {"RTX-6000-Ada": True}
    assert any("config.json from the Hugging Face Hub" in a for a in out["assumptions"])


def test_uncached_id_offline_is_one_line_exit_2(tmp_path):
    r = run_cli({"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}, "memory", "Qwen/Qwen2.5-3B")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Qwen/Qwen2.5-3B" in r.stderr and "HF_HUB_OFFLINE" in r.stderr


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """huggingface_hub's cache folder for this process (what HF_HOME sets at import), offline."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def test_unlisted_id_with_a_presets_architecture_is_that_preset(hub_cache):
    cfg = json.loads((ROOT / "gpuwise/data/models/mistral-7b.json").read_text())
    cfg.pop("gpuwise")
    cache_config(hub_cache, "someone/mistral-7b-finetune", cfg)
    spec = load_model("someone/mistral-7b-finetune")
    assert spec.name == "mistral-7b" and "its config.json has the preset's architecture" in spec.source
    cache_config(hub_cache, "Qwen/Qwen2.5-0.5B", QWEN_05B)                 # Qwen's own config.json
    assert load_model("Qwen/Qwen2.5-0.5B").name == "qwen2.5-0.5b"


def test_hub_id_in_estimate_fit_gpus_and_job_spec(hub_cache, tmp_path, capsys):
    cache_config(hub_cache, "Qwen/Qwen2.5-1.5B-ci", QWEN_15B)
    assert main(["estimate", "--model", "Qwen/Qwen2.5-1.5B-ci", "--gpu", "RTX-6000-Ada", "--gpus", "1",
                 "--batch-size", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "Qwen/Qwen2.5-1.5B-ci"
    assert main(["fit-gpus", "Qwen/Qwen2.5-1.5B-ci", "--gpu", "RTX-6000-Ada", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["gpus"] == 1
    from gpuwise.workload.jobspec import parse_job

    job = parse_job({"model": "Qwen/Qwen2.5-1.5B-ci", "training": {"global_batch": 8, "tokens": 1e6}})
    assert param_count(job.model_spec()) == 1_543_714_304


def test_every_listed_id_names_a_bundled_preset():
    from gpuwise.data import data_path, read_commented_csv
    from gpuwise.workload.models import list_presets

    rows = read_commented_csv(data_path("hf_model_ids.csv"))
    assert len(rows) >= 40 and all(r["source"].strip() for r in rows)
    assert {r["preset"] for r in rows} <= set(list_presets())
    assert len({r["repo_id"].lower() for r in rows}) == len(rows)
