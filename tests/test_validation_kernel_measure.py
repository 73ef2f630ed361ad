"""The kernel harness for a lent GPU (gpuwise.validation.kernel_measure): its shapes are the model's, it runs (on a
CPU here, at a fraction of the size) and its comparison reads the step model's own constants."""

from __future__ import annotations

import csv

import pytest

torch = pytest.importorskip("torch")

from gpuwise.validation import kernel_measure as km  # noqa: E402
from gpuwise.workload.models import load_model  # noqa: E402


def test_shapes_are_the_linear_layers_the_harness_runs_and_the_attention_core():
    got = {s.op: s for s in km.model_shapes(load_model("llama-3.1-8b"), 1, 4096)}
    # Llama-3.1-8B as gpuwise.nn builds it: separate q/k/v (32 query, 8 key-value heads of 128), gate and up of
    # 14336, an untied output layer over 128256 tokens; (op, M tokens, k inputs, n outputs)
    assert {(s.op, s.m, s.k, s.n) for s in got.values() if s.kind == "gemm"} == {
        ("q", 4096, 4096, 4096), ("k", 4096, 4096, 1024), ("v", 4096, 4096, 1024), ("o", 4096, 4096, 4096),
        ("gate", 4096, 4096, 14336), ("up", 4096, 4096, 14336), ("down", 4096, 14336, 4096),
        ("head", 4096, 4096, 128256)}
    att = got["attention"]
    assert (att.batch, att.heads, att.kv_heads, att.seq, att.head_dim) == (1, 32, 8, 4096, 128)
    assert got["o"].flops == 3 * 2.0 * 4096 ** 3 and got["k"].width == 1024
    gpt2 = {s.op: (s.k, s.n) for s in km.model_shapes(load_model("gpt2"), 8, 1024)}
    assert gpt2["qkv"] == (768, 2304) and gpt2["head"] == (768, 50257)      # fused qkv; tied output layer
    every = km.shapes()
    assert len(every) == len(set(every)) and {s.model for s in every} >= {"gpt2", "llama-3.1-8b", "qwen2.5-0.5b"}


def test_the_harness_times_each_kernel_and_writes_its_rows(tmp_path):
    out = tmp_path / "k.csv"
    assert km.main(["--device", "cpu", "--only", "gpt2", "--scale", "64", "--repeats", "1", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["op"] for r in rows] == ["attention", "qkv", "o", "up", "down", "head"]
    for r in rows:
        assert r["status"] == "ok"
        assert float(r["seconds"]) > 0 and float(r["tflops"]) == pytest.approx(float(r["flops"]) / float(r["seconds"])
                                                                              / 1e12)
    gemm = rows[1]
    assert float(gemm["flops"]) == 3 * 2 * int(gemm["m"]) * int(gemm["n"]) * int(gemm["k"])


def test_compare_reads_the_cards_peak_and_the_step_models_efficiency(tmp_path, capsys):
    from gpuwise.estimate.roofline_step import op_efficiency_for
    from gpuwise.hardware.gpus import get_gpu

    row = {f: 0 for f in km.FIELDS} | {"device": "NVIDIA H100 80GB HBM3", "model": "x", "op": "o",
                                       "kind": "gemm", "width": 4096, "tflops": 400.0, "seq": 0, "status": "ok"}
    path = tmp_path / "h100.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=km.FIELDS)
        w.writeheader()
        w.writerow(row)
    h100 = get_gpu("H100-80GB-SXM")
    eff = op_efficiency_for(h100)
    got = km.compare(path)[0]
    assert got["measured_eff"] == pytest.approx(400.0 / h100.bf16_tflops)
    assert got["model_eff"] == pytest.approx(eff.gemm * 4096 / (4096 + eff.gemm_w0))
    cpu = tmp_path / "cpu.csv"
    cpu.write_text(path.read_text().replace("NVIDIA H100 80GB HBM3", "cpu"))
    assert km.main(["--compare", str(cpu)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "device" in err[0] and "cpu" in err[0]
    assert km.main(["--only", "nosuch", "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "only" in err[0] and "nosuch" in err[0]
