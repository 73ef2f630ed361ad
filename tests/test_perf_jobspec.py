"""Job spec (issue 3 scope 1): examples load; bad fields are named by their YAML path."""

import subprocess
import sys
from pathlib import Path

import pytest

from gpuwise.errors import InputError
from gpuwise.workload.jobspec import load_job, parse_job

ROOT = Path(__file__).resolve().parents[1]
BASE = {"model": "llama-3.1-8b", "training": {"tokens": 1e9, "global_batch": 64}}


@pytest.mark.parametrize("name", ["llama-3.1-8b-pretrain", "llama-3.1-8b-lora", "resnet50-imagenet"])
def test_examples_load(name):
    job = load_job(ROOT / "examples" / f"{name}.yaml")
    spec = job.model_spec()
    token = spec.sample_unit == "token"
    assert job.training.amount_samples(token) > 0
    lo, hi = job.training.batch_range
    assert 0 < lo <= hi


def test_amounts():
    j = parse_job({"model": "llama-3.1-8b", "training": {"tokens": 8192e6, "seq_len": 8192, "global_batch": 8}})
    assert j.training.amount_samples(True) == pytest.approx(1e6)
    j = parse_job({"model": "resnet50", "training": {"epochs": 2, "dataset_samples": 100, "global_batch": 8}})
    assert j.training.amount_samples(False) == 200
    j = parse_job({"model": "resnet50", "training": {"steps": 10, "reference_batch": 32, "global_batch": [8, 64]}})
    assert j.training.amount_samples(False) == 320 and j.training.batch_range == (8, 64)


def _with(path: str, value):
    import copy

    d = copy.deepcopy(BASE)
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return d


@pytest.mark.parametrize("path,value,expect", [
    ("training.tokens", -5, "training.tokens: -5 is invalid; must be > 0"),
    ("training.precision", "fp7", "training.precision"),
    ("training.global_batch", [64, 8], "training.global_batch"),
    ("training.recompute", "some", "training.recompute"),
    ("parallelism.zero", [4], "parallelism.zero"),
    ("parallelism.tp", [0], "parallelism.tp"),
    ("checkpoint.restart_minutes", -1, "checkpoint.restart_minutes"),
    ("constraints.max_gpus", 0, "constraints.max_gpus"),
    ("training.epochs", 3, "give only one training amount"),
    ("budget_usd", -2, "budget_usd"),
    ("training.colour", "red", "training.colour: 'colour' is invalid; unknown key"),
])
def test_errors_name_yaml_path(path, value, expect):
    with pytest.raises(InputError) as exc:
        parse_job(_with(path, value))
    assert expect in str(exc.value)


def test_explicit_model_and_unknown_preset():
    with pytest.raises(InputError, match=r"model\.params"):
        parse_job({**BASE, "model": {"params": -1, "flops_per_sample": 1e9}})
    j = parse_job({**BASE, "model": {"name": "cnn", "params": 1e7, "flops_per_sample": 2e9}})
    assert j.model_spec().explicit_params == 10_000_000
    with pytest.raises(InputError, match="did you mean"):
        parse_job({**BASE, "model": "lama-3.1-8b"}).model_spec()


def test_cli_exit_code_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: llama-3.1-8b\ntraining:\n  tokens: 0\n  global_batch: 8\n")
    r = subprocess.run([sys.executable, "-m", "gpuwise", "estimate", str(bad), "--gpu", "H100", "--gpus", "8"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "training.tokens" in r.stderr and "must be > 0" in r.stderr and "Traceback" not in r.stderr
