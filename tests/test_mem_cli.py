"""CLI golden outputs and exit codes for `gpuwise memory`, `fit-gpus`, `models`, `validate memory`.

Golden numbers are the estimator's own (regression guard; the published sources they rest on are
checked in test_mem_formulas.py and test_mem_validation.py), compared to 1e-3 GiB."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuwise.cli.main import main


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


GOLDEN_8B_ZERO3 = {  # gpuwise memory llama-3.1-8b --gpus 8 --zero 3 --recompute full --json
    # FSDP2 bf16-mixed, fused AdamW: fp32 sharded params (4 B), gradients (4 B) and moments (8 B) / 8; the
    # peak is the root group's gradient reduction at the end of backward (embedding + output layer
    # gradients in bf16 and their fp32 reduce-scatter input, as traced); overhead = slack (28.9% of the allocated
    # peak + 0.06 GiB: more than one rank) + context + NCCL
    "per_gpu_gib": 26.8556,
    "breakdown_gib": {"parameters": 3.7394, "gradients": 3.7394, "optimizer": 7.4788, "activations": 0.0,
                      "temporaries": 5.3819, "overhead": 6.5162},
}


def test_memory_json_golden(capsys):
    out = run_json(capsys, "memory", "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--recompute", "full", "--json")
    assert out["per_gpu_gib"] == pytest.approx(GOLDEN_8B_ZERO3["per_gpu_gib"], abs=1e-3)
    for k, v in GOLDEN_8B_ZERO3["breakdown_gib"].items():
        assert out["breakdown_gib"][k] == pytest.approx(v, abs=1e-3)
    assert set(out["breakdown_gib"]) == {"parameters", "gradients", "optimizer", "activations", "temporaries",
                                         "overhead"}
    assert out["peak_phase"] == "root reduce-scatter" and out["allocated_gib"] < out["reserved_gib"] < out["per_gpu_gib"]
    assert out["params"] == 8_030_261_248 and out["trainable_params"] == out["params"]
    assert out["fits"]["H100-80GB-SXM"] is True and out["fits"]["T4"] is False
    assert out["config"]["plan"] == {"gpus": 8, "dp": 8, "tp": 1, "pp": 1, "cp": 1, "sp": False, "zero": 3,
                                     "zero_shard": 0, "pp_schedule": "1f1b"}
    assert isinstance(out["assumptions"], list) and any("allocator slack" in a for a in out["assumptions"])


def test_memory_all_flags(capsys, tmp_path):
    out = run_json(capsys, "memory", "llama-3.1-70b", "--gpus", "16", "--batch-size", "2", "--seq-len", "4096",
                   "--precision", "bf16", "--optimizer", "adamw-8bit", "--zero", "1", "--tp", "4", "--pp", "2",
                   "--cp", "2", "--recompute", "selective", "--sp", "--grad-accum", "4", "--no-flash-attention",
                   "--gpu", "H100", "A100-40GB", "--json")
    assert out["config"]["plan"]["dp"] == 1 and set(out["fits"]) == {"H100-80GB-SXM", "A100-40GB-SXM"}
    q = run_json(capsys, "memory", "llama-3.1-8b", "--lora-rank", "16", "--quantize", "nf4", "--offload-optimizer",
                 "--recompute", "full", "--gpu", "L4", "--json")
    assert q["fits"] == {"L4": True} and 0 < q["trainable_params"] < 1e8
    assert q["breakdown_gib"]["optimizer"] == 0


def test_memory_human_output(capsys):
    assert main(["memory", "gpt2", "--gpu", "T4", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "Per-GPU peak memory" in out and "Assumptions:" in out and "T4" in out
    assert "1024 tokens" in out        # default seq-len capped at gpt2's position table


@pytest.mark.parametrize("argv,needle", [
    (["memory", "llama-3.1-7b"], "llama-3.1-8b"),                       # unknown model -> closest
    (["memory", "llama-3.1-8b", "--gpu", "H1000"], "H100"),              # unknown GPU -> closest
    (["memory", "llama-3.1-8b", "--tp", "3", "--gpus", "3"], "tp"),      # tp does not divide heads
    (["memory", "llama-3.1-8b", "--pp", "64", "--gpus", "64"], "pp"),    # pp > layers
    (["memory", "llama-3.1-8b", "--batch-size", "0"], "batch-size"),
    (["memory", "llama-3.1-8b", "--gpus", "6", "--tp", "4"], "gpus"),    # not divisible by tp*pp*cp
    (["memory", "llama-3.1-8b", "--precision", "fp64"], "precision"),
    (["fit-gpus", "nosuchmodel"], "model"),
    (["fit-gpus", "gpt2", "--max-gpus", "0"], "max-gpus"),
])
def test_bad_input_exit_2_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


def test_unknown_preset_of_another_size_is_not_suggested(capsys):
    """qwen2.5-72b is not a typo of qwen2.5-7b (10x the parameters): no such preset, and how to give it."""
    assert main(["memory", "qwen2.5-72b"]) == 2
    err = capsys.readouterr().err
    assert "no such preset" in err and "config.json" in err and "qwen2.5-7b" not in err
    assert main(["memory", "mpt-300m"]) == 2          # within 2x of a preset: still a plausible typo
    assert "did you mean mpt-350m" in capsys.readouterr().err


def test_malformed_config_names_field(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
                             "num_attention_heads": 32, "vocab_size": 32000}))
    assert main(["memory", str(p)]) == 2
    assert "intermediate_size" in capsys.readouterr().err


def test_fit_gpus_json(capsys):
    out = run_json(capsys, "fit-gpus", "llama-3.1-70b", "--seq-len", "4096", "--gpu", "H100", "H200", "T4",
                   "--max-gpus", "64", "--json")
    res = out["results"]
    assert [r["gpu"] for r in res][-1] == "T4" and res[-1]["gpus"] is None
    h200 = next(r for r in res if r["gpu"] == "H200-SXM")
    h100 = next(r for r in res if r["gpu"] == "H100-80GB-SXM")
    assert h200["gpus"] < h100["gpus"]
    for r in res[:2]:
        p = r["plan"]
        assert p["dp"] * p["tp"] * p["pp"] * p["cp"] == r["gpus"] and r["required_gib"] <= 0.95 * r["device_gib"]
        # the same names as estimate/memory: usable = device less headroom, spare = usable - required
        assert r["usable_gib"] == pytest.approx(r["device_gib"] - r["headroom_gib"], abs=1e-3)
        assert r["spare_gib"] == pytest.approx(r["usable_gib"] - r["required_gib"], abs=1e-3) and r["spare_gib"] >= 0
        assert {"dp", "tp", "pp", "zero", "recompute"} <= set(p)
    assert out["assumptions"]


def test_fit_gpus_human(capsys):
    assert main(["fit-gpus", "mistral-7b", "--lora-rank", "8", "--gpu", "L4", "A100-80GB"]) == 0
    assert "Fewest GPUs per type" in capsys.readouterr().out


def test_models_json(capsys):
    out = run_json(capsys, "models", "--json")
    names = {m["name"]: m for m in out["models"]}
    assert names["llama-3.1-8b"]["params"] == 8_030_261_248
    assert all(abs(m["diff_pct"]) <= 0.5 for m in out["models"] if m["published_params"] is not None)
    # architecture-only presets (llm-foundry's MPT sizes) claim no published count
    assert names["mpt-125m"]["published_params"] is None and names["mpt-125m"]["diff_pct"] is None
    assert names["mixtral-8x7b"]["active_params"] < names["mixtral-8x7b"]["params"]


def test_validate_memory_json_and_human(capsys):
    out = run_json(capsys, "validate", "memory", "--json")
    # the headline is the external measured rows; formula-derived and in-sample rows are consistency checks
    assert out["median_abs_error"] == out["headline"]["median_abs_error"] and out["not_modelled"] > 0
    assert out["consistency_checks"]["median_abs_error"] <= 0.08 and "litgpt" in out["by_stack"]
    assert {r["kind"] for r in out["rows"]} == {"external", "in-sample", "formula", "loso"}
    assert out["allocator_slack_loso"]["rows"] == 33 + 28 and "by_source" in out
    assert all(r["note"] for r in out["rows"] if r["status"] == "not modelled")
    assert main(["validate", "memory"]) == 0
    text = capsys.readouterr().out
    assert "headline (external measured rows)" in text and "not averaged into the headline" in text


def test_exit_code_through_the_console_entry():
    r = subprocess.run([sys.executable, "-m", "gpuwise", "memory", "llama-3.1-8b", "--tp", "3", "--gpus", "3"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_how_to_make_it_fit_agrees_with_memory_itself(capsys):
    """Each listed change, run through `gpuwise memory` with its flags, needs what the list says and fits
    the GPUs it names; a configuration that fits every GPU asked about lists nothing."""
    gpus = ["--gpu", "L4", "A100-40GB", "H100"]
    d = run_json(capsys, "memory", "llama-3.1-8b", *gpus, "--json")
    assert not any(d["fits"].values())
    levers = {lv["lever"]: lv for lv in d["how_to_fit"]}
    for name, flags in (("LoRA rank 16", ["--lora-rank", "16"]), ("ZeRO-3 over 8 GPUs", ["--gpus", "8", "--zero", "3"]),
                        ("optimizer offload to host memory", ["--offload-optimizer"])):
        again = run_json(capsys, "memory", "llama-3.1-8b", *gpus, *flags, "--json")
        assert again["required_gib"] == pytest.approx(levers[name]["required_gib"], abs=0.01)
        fitting = sorted(g for g, ok in again["fits"].items() if ok)
        # a ZeRO-3 row names the GPUs that fit first at its width (H100 already fits over 2)
        assert set(levers[name]["fits"]) <= set(fitting) if "ZeRO" in name else fitting == sorted(levers[name]["fits"])
    assert levers["a larger GPU: H200-SXM (141 GB)"]["fits"] == ["H200-SXM"]
    assert run_json(capsys, "memory", "llama-3.1-8b", "--gpu", "H200", "--json")["how_to_fit"] == []
