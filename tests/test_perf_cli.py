"""CLI golden outputs and exit codes for `gpuwise estimate`, `gpuwise fit`, `gpuwise validate throughput`."""

import csv
import json
import math
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.validation.throughput import online_training_points
from gpuwise.workload.pollux_traces import load_placements

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--batch-size", "1",
         "--seq-len", "4096", "--precision", "bf16-mixed", "--zero", "3", "--recompute", "full"]


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_flags_json(capsys):
    out = _json(capsys, FLAGS + ["--grad-accum", "4", "--tokens", "1e9", "--price", "2.5", "--json"])
    for key in ("step_time_s", "tokens_per_second_per_gpu", "mfu", "time_to_target_hours", "cost_usd", "assumptions"):
        assert key in out
    assert out["global_batch"] == 32 and out["plan"]["zero"] == 3
    # tokens/s per GPU = global batch * seq / step / gpus
    assert out["tokens_per_second_per_gpu"] == pytest.approx(32 * 4096 / out["step_time_s"] / 8)
    # time = steps * step (+ checkpoints); cost = time * nodes * node price (Scavenger C = T*K*p), exact
    assert out["steps"] == pytest.approx(1e9 / 4096 / 32)
    assert out["cost_usd"] == pytest.approx(out["time_to_target_hours"] * 1 * 2.5 * 8, rel=1e-12)
    assert 0.2 < out["mfu"] < 0.8
    assert any("price" in a for a in out["assumptions"])


def test_estimate_without_amount_has_no_time(capsys):
    out = _json(capsys, FLAGS + ["--json"])
    assert "time_to_target_hours" not in out and "cost_usd" not in out
    assert "price" in out  # cheapest catalog offering with that GPU, and it says which
    assert "catalog" in out["price"]["source"]


def test_estimate_samples_for_non_token_model(capsys):
    out = _json(capsys, ["estimate", "--model", "resnet50", "--gpu", "V100", "--gpus", "4", "--batch-size", "64",
                         "--precision", "fp32", "--zero", "0", "--recompute", "none", "--tokens", "1281167",
                         "--json"])
    assert "samples_per_second_per_gpu" in out and "tokens_per_second_per_gpu" not in out
    # Gavel V100 ResNet-50 bs64 single GPU: 4.39 steps/s = 281 img/s; 4 GPUs ~ same per GPU
    assert 200 < out["samples_per_second_per_gpu"] < 320


@pytest.mark.parametrize("name", ["llama-3.1-8b-pretrain", "llama-3.1-8b-lora", "resnet50-imagenet"])
def test_estimate_examples(capsys, name):
    out = _json(capsys, ["estimate", str(ROOT / "examples" / f"{name}.yaml"), "--gpu", "A100-80GB", "--gpus", "8",
                         "--json"])
    assert out["time_to_target_hours"] > 0 and math.isfinite(out["step_time_s"])
    lo_hi = {"llama-3.1-8b-pretrain": (512, 512), "llama-3.1-8b-lora": (32, 128), "resnet50-imagenet": (256, 8192)}
    lo, hi = lo_hi[name]
    assert lo <= out["global_batch"] <= hi * 1.01


def test_estimate_spot_spread(capsys):
    out = _json(capsys, ["estimate", str(ROOT / "examples" / "llama-3.1-8b-pretrain.yaml"), "--gpu", "H100",
                         "--gpus", "16", "--spot", "--json"])
    assert out["time_to_target_hours_p10"] <= out["time_to_target_hours_p50"] <= out["time_to_target_hours_p90"]
    assert out["time_to_target_hours"] >= out["compute_hours"]
    assert out["preemption"]["expected_preemptions"] > 0
    assert out["price"]["spot"] is True


@pytest.mark.parametrize("argv,needle", [
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "0", "--batch-size", "1"], "--gpus"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "H9000", "--gpus", "8", "--batch-size", "1"], "did you mean"),
    (["estimate", "--model", "lama", "--gpu", "H100", "--gpus", "8", "--batch-size", "1"], "model"),
    (["estimate", "--gpu", "H100", "--gpus", "8"], "JOB"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--batch-size", "1", "--tp", "3"], "tp"),
    (["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--batch-size", "1",
      "--precision", "fp8-magic"], "precision"),
])
def test_estimate_bad_input_exit_2(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _write(path, rows, cols):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for r in rows:
            w.writerow([getattr(r, c) for c in cols])


def test_fit_and_predict_json(tmp_path, capsys):
    rows = load_placements("imagenet")
    train = [rows[i] for i in online_training_points(rows)]
    cols = ["placement", "local_bsz", "step_time", "sync_time"]
    _write(tmp_path / "train.csv", train, cols)
    pts = rows[200:210]
    _write(tmp_path / "pts.csv", pts, cols)
    _write(tmp_path / "pts_noy.csv", pts, ["placement", "local_bsz"])
    out = _json(capsys, ["fit", str(tmp_path / "train.csv"), "--predict", str(tmp_path / "pts.csv"), "--json"])
    assert out["form"] == "extended" and {"delta", "eta"} <= set(out["parameters"])
    assert any("extended" in a for a in out["assumptions"])
    pol = _json(capsys, ["fit", str(tmp_path / "train.csv"), "--form", "pollux", "--json"])
    assert set(pol["parameters"]) == {"alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma"}
    assert out["in_sample_error"]["median"] < 0.05
    assert len(out["predictions"]) == 10
    assert [p["placement"] for p in out["predictions"]] == [r.placement for r in pts]  # row order kept
    # measured values are not used for prediction: same predictions without them
    out2 = _json(capsys, ["fit", str(tmp_path / "train.csv"), "--predict", str(tmp_path / "pts_noy.csv"), "--json"])
    assert [p["step_time"] for p in out2["predictions"]] == [p["step_time"] for p in out["predictions"]]
    assert all(p["sync_time"] >= 0 and p["step_time"] > 0 for p in out2["predictions"])


def test_fit_missing_columns_exit_2(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("placement,local_bsz\n1,32\n2,32\n")
    assert main(["fit", str(tmp_path / "bad.csv")]) == 2
    err = capsys.readouterr().err
    assert "step_time" in err and "sync_time" in err and "Traceback" not in err
    assert main(["fit", str(tmp_path / "nope.csv")]) == 2


@pytest.mark.slow  # fits three forms on the design rule, one on the online rule, on six profiles (20-45 s)
def test_validate_throughput_json(capsys):
    out = _json(capsys, ["validate", "throughput", "--json"])
    assert len(out["fitted"]["applications"]) == 6
    assert all(a["train_points"] <= 10 for a in out["fitted"]["applications"])
    assert out["analytical"]["median_error"] <= 0.15
    assert "nvidia-rn50" in out["analytical"]["summary"]
    forms = {(f["form"], f["rule"]) for f in out["fitted"]["by_form_and_rule"]}
    assert forms == {("bottleneck", "design"), ("extended", "design"), ("pollux", "design"), ("pollux", "online")}
    assert out["fitted"]["form"] == "bottleneck"
