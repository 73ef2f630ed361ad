"""The GPU measurement harness (gpuwise.validation.gpu_measure) runs end to end. No GPU is lent to CI, so it
runs here on the CPU, where PyTorch keeps no memory statistics: the step and the CSV are real, the memory
columns empty. On a CUDA machine the same command fills them (issue 11, item 3)."""

import csv
import json

import pytest

pytest.importorskip("torch")


@pytest.mark.slow
def test_harness_trains_and_writes_a_row(tmp_path):
    from gpuwise.validation.gpu_measure import COLUMNS, GRID, main

    out = tmp_path / "runs.csv"
    argv = ["--device", "cpu", "--only", "gpt2", "--layers", "1", "--seq-len", "32", "--precision", "fp32",
            "--out", str(out)]
    assert main(argv) == 0
    assert main(argv) == 0                       # resumes: configurations already measured are skipped
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == sum(1 for e in GRID if e[0] == "gpt2")
    r = rows[0]
    assert tuple(r) == COLUMNS and r["status"] == "ok" and r["device"] == "cpu" and r["layers"] == "1"
    assert r["seq_len"] == "32"
    assert float(r["measured_step_s"]) > 0 and float(r["measured_tokens_per_s"]) > 0
    assert float(r["predicted_allocated_gib"]) > 0 and r["measured_allocated_gib"] == ""


def test_device_names_map_to_their_own_rows():
    from gpuwise.validation.gpu_measure import gpu_row

    assert gpu_row("NVIDIA H100 80GB HBM3") == "H100-80GB-SXM"
    assert gpu_row("NVIDIA H100 PCIe") == "H100-80GB-PCIE" and gpu_row("NVIDIA H100 NVL") == "H100-NVL"
    assert gpu_row("NVIDIA GH200 480GB") == "GH200" and gpu_row("NVIDIA H200") == "H200-SXM"
    assert gpu_row("NVIDIA A100-SXM4-80GB") == "A100-80GB-SXM" and gpu_row("NVIDIA A100 80GB PCIe") == "A100-80GB-PCIE"
    assert gpu_row("NVIDIA L40") == "L40" and gpu_row("NVIDIA L40S") == "L40S" and gpu_row("NVIDIA L4") == "L4"
    assert gpu_row("Tesla T4") == "T4" and gpu_row("NVIDIA GeForce GT 710") is None   # unknown: None


def test_grid_configurations_fit_one_80gb_gpu():
    """Every grid entry is predicted to fit a single H100 (required <= usable), so a lent GPU runs them all."""
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.validation.gpu_measure import GRID, config
    from gpuwise.workload.models import load_model

    h100 = get_gpu("H100")
    for name, *rest in GRID:
        assert estimate_memory(load_model(name), config(*rest)).fits(h100), name


def test_cuda_asked_without_a_gpu_is_one_line_and_exit_2(tmp_path, capsys):
    import torch

    from gpuwise.validation.gpu_measure import main

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the harness would measure it")
    assert main(["--out", str(tmp_path / "runs.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device" in err and "--device cpu" in err
    assert not (tmp_path / "runs.csv").exists()


def test_optimizer_in_backward_hooks_are_removed_so_the_row_frees_its_model():
    """The hooks hold the model beyond the cycle collector's sight (the first H200 run carried 14.6 GiB of
    one row into every later one); removing their handles frees it."""
    import dataclasses
    import gc
    import weakref

    from gpuwise.validation.gpu_measure import build, config
    from gpuwise.workload.models import load_model

    spec = dataclasses.replace(load_model("gpt2"), n_layers=1)
    cfg = config(1, 16, "fp32", "none", 0, None, "optimizer_in_backward=1")

    def built(remove: bool):
        model, opts, hooks = build(spec, cfg, "cpu")
        ref = weakref.ref(next(model.parameters()))
        if remove:
            for h in hooks:
                h.remove()
        del model, opts, hooks
        gc.collect()
        return ref

    assert built(remove=False)() is not None      # the leak is real: gc alone does not free it
    assert built(remove=True)() is None


def test_the_gpu_session_script_parses_and_names_real_entry_points():
    """scripts/gpu_session.sh (what produced gpuwise/data/measured/gpu/) parses, and every module it runs exists."""
    import importlib.util
    import re
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu_session.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    modules = set(re.findall(r"python3 -m ([\w.]+)", script.read_text()))
    assert {"gpuwise.validation.gpu_measure", "gpuwise.validation.gpu_peak", "gpuwise.cli.main"} <= modules
    assert all(importlib.util.find_spec(m) is not None for m in modules)


def test_varying_rows_draw_the_lengths_the_allocator_simulation_replays(monkeypatch):
    """The `varying` set (not yet measured on a GPU) trains micro-batches at the lengths the simulation draws for
    the same row (same LengthDist, seed 0), two a step under grad_accum 2, with the shared train_step."""
    from dataclasses import replace

    import gpuwise.trace.step as step
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.validation import gpu_measure as gm
    from gpuwise.workload.models import load_model

    h100 = get_gpu("H100")
    for name, micro, seq, *rest in gm.VARYING:              # every row fits the card it will run on
        assert estimate_memory(load_model(name), gm.config(micro, seq, *rest)).fits(h100), name
    levers = "grad_accum=2;lengths=uniform:8"
    cfg = gm.config(1, 32, "fp32", "none", 0, None, levers)
    dist = gm.lengths_of(levers, 32)
    assert cfg.grad_accum == 2 and dist.kind == "uniform" and dist.min_len == 8
    shapes, real = [], step.train_step

    def spy(model, opts, cfg, batches, **kw):
        shapes.append([tuple(b.shape) for b in batches])
        return real(model, opts, cfg, batches, **kw)
    monkeypatch.setattr(step, "train_step", spy)
    spec = replace(load_model("gpt2"), n_layers=1)
    m = gm.measure(spec, cfg, device="cpu", steps=3, lengths=dist)
    draw = dist.sampler(0)
    assert shapes == [[(1, draw()), (1, draw())] for _ in range(3)] and m.step_s > 0


def test_varying_rows_train_as_many_steps_as_the_simulation_replays():
    from gpuwise.trace.reserved import DEFAULT_STEPS, Replay
    from gpuwise.validation.gpu_measure import VARYING_STEPS

    assert VARYING_STEPS == DEFAULT_STEPS == Replay.run.__defaults__[0]


def test_validate_gpu_renders_a_measured_row_without_tokens_per_s(tmp_path, monkeypatch, capsys):
    """A varying row (drawn lengths) has no tokens/s: the table prints '-' for it."""
    import csv

    from gpuwise.cli.main import main
    from gpuwise.validation import gpu_runs
    from gpuwise.validation.gpu_measure import COLUMNS

    grid = next(r for r in csv.DictReader(gpu_runs.SETS["grid"].open()) if r["model"] == "gpt2")
    path = tmp_path / "gpu_varying_runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS)
        w.writeheader()
        w.writerow({**grid, "levers": "lengths=uniform:32", "measured_tokens_per_s": "",
                    "predicted_tokens_per_s": ""})
    monkeypatch.setitem(gpu_runs.SETS, "varying", path)
    assert main(["validate", "gpu", "--model", "gpt2"]) == 0          # the text table (it raised on None)
    capsys.readouterr()
    assert main(["validate", "gpu", "--model", "gpt2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert any(r["set"] == "varying" and "lengths=uniform:32" in json.dumps(r) for r in rows)


def test_adapter_rows_ask_what_the_step_model_assumes_and_fit_one_80gb_gpu():
    """The `adapters` set (for the next lent GPU): the same step with plain adapters, PEFT's float32 layers with and
    without dropout, a full fine-tune and a padding mask, each configured as its levers say and predicted to fit."""
    from gpuwise.estimate.adapter_traffic import adapter_key
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.validation.gpu_measure import ADAPTERS, SETS, config
    from gpuwise.workload.models import load_model

    assert SETS["adapters"] is ADAPTERS
    cfgs = [config(*rest) for _, *rest in ADAPTERS]
    keys = [adapter_key(c)[:3] for c in cfgs if c.lora_rank]
    assert (False, False, "pure16") in keys and (True, False, "pure16") in keys and (True, True, "pure16") in keys
    assert sum(c.padding_mask for c in cfgs) == 2 and any(c.lora_rank == 0 and not c.padding_mask for c in cfgs)
    h100 = get_gpu("H100")
    for (name, *_), cfg in zip(ADAPTERS, cfgs):
        assert estimate_memory(load_model(name), cfg).fits(h100), (name, cfg)
