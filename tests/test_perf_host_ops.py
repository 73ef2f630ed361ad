"""The host's dispatch floor under eager steps (estimate/host_ops.py): op counts against real PyTorch steps,
the per-op cost's fit rule, and where the floor applies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.estimate.host_ops import HOST_S_PER_OP, step_ops
from gpuwise.estimate.performance import step_of
from gpuwise.hardware.gpus import get_gpu
from gpuwise.validation import host_ops as counting
from gpuwise.workload.models import load_model


def host_step_s(spec, cfg):
    return step_ops(spec, cfg) * HOST_S_PER_OP
from gpuwise.workload.training import TrainingConfig

BASE = TrainingConfig(micro_batch=1, seq_len=16, precision="bf16-mixed", optimizer_impl="fused")


@pytest.mark.parametrize("family,cfg", [
    ("llama", BASE), ("gpt2", replace(BASE, optimizer_impl="foreach")), ("mpt", replace(BASE, recompute="full")),
    ("qwen2", replace(BASE, lora_rank=8, lora_targets="q,k,v,o,gate,up,down")), ("phi", replace(BASE, grad_accum=2)),
    ("falcon", replace(BASE, optimizer_impl="per-param")),
    ("phi3", replace(BASE, lora_rank=8, lora_targets="all-linear", recompute="full")),
    ("llama", replace(BASE, precision="bf16", loss_kernel="chunked")), ("gpt2", replace(BASE, precision="fp32")),
    ("llama", replace(BASE, precision="bf16", lora_rank=8, lora_targets="all-linear,head"))])
def test_counts_predict_a_real_step_at_another_depth(family, cfg):
    """The table was counted at 1 and 2 layers; a real 3-layer step's ops (every aten op dispatched, counted by
    a TorchDispatchMode) match the analytic count, whatever the precision, loss kernel, recompute, LoRA targets
    (the head's too), accumulation or optimizer."""
    spec = counting._tiny(load_model(counting.FAMILY_PRESETS[family]), 3)
    fwd_bwd, opt, _ = counting.count(spec, replace(cfg, grad_accum=1), cfg.optimizer_impl)
    real = cfg.grad_accum * fwd_bwd + opt
    assert step_ops(spec, cfg) == pytest.approx(real, rel=0.02)


def test_per_op_cost_is_the_floor_rule_on_the_h200_grid():
    """A consistency check: HOST_S_PER_OP is what its rule gives on the H200 grid it is fitted on (in-sample)."""
    s, where = counting.fit_host_s_per_op()
    assert HOST_S_PER_OP == pytest.approx(round(s * 1e7) / 1e7)
    assert where.startswith("gpt2-xl")


def test_floor_binds_small_eager_steps_only():
    h200 = get_gpu("H200-SXM")
    gpt2 = load_model("gpt2")
    small = TrainingConfig(micro_batch=8, seq_len=1024, optimizer_impl="foreach")
    st = step_of(gpt2, small, h200, 1)
    assert st.step_time_s == pytest.approx(host_step_s(gpt2, small)) == pytest.approx(st.host_s)
    assert any("host-bound" in a for a in st.assumptions)
    # a large step is the GPU's: the floor is stated, not binding
    big = step_of(load_model("llama-3.1-8b"), TrainingConfig(micro_batch=2, seq_len=4096), h200, 1)
    assert big.step_time_s > host_step_s(load_model("llama-3.1-8b"), TrainingConfig(micro_batch=2, seq_len=4096))
    assert not any("host-bound" in a for a in big.assumptions)
    # compiled blocks and a C/CUDA stack dispatch no per-op host work: no floor
    for cfg in (replace(small, compile=True), replace(small, stack="llm.c", optimizer_impl=None)):
        st = step_of(gpt2, cfg, h200, 1)
        assert st.step_time_s < host_step_s(gpt2, small) and st.host_s is None
        assert any("host floor: not applied" in a for a in st.assumptions)


def test_families_without_counts_say_so():
    t5 = load_model("t5-base")
    assert step_ops(t5, TrainingConfig(micro_batch=1, seq_len=128)) is None
    st = step_of(t5, TrainingConfig(micro_batch=1, seq_len=128), get_gpu("H100-80GB-SXM"), 1)
    assert any("no op count for family t5" in a for a in st.assumptions) and st.host_s is None


def test_what_the_count_leaves_out_is_said():
    from gpuwise.estimate.host_ops import count_step

    cfg = TrainingConfig(micro_batch=1, seq_len=1024, optimizer="sgd", recompute="selective", lora_rank=8,
                         quantize="nf4", loss_kernel="fused-linear")
    notes = " ".join(count_step(load_model("qwen3-8b"), cfg).notes)
    for part in ("sgd step counted as AdamW", "selective recompute", "NF4 dequantisation", "fused-linear counted as "
                 "eager", "q/k RMSNorm"):
        assert part in notes


def test_plan_does_not_merge_one_configurations_host_bound_note():
    """A search merges its step-time notes; "host-bound" is a state of one configuration, not an assumption."""
    from gpuwise.estimate.goodput import JobGoodput
    from gpuwise.workload.jobspec import parse_job

    spec = parse_job({"name": "g", "model": "gpt2-xl", "training": {"tokens": 1e8, "seq_len": 1024,
                                                                    "global_batch": 16}})
    good = JobGoodput.from_jobspec(spec)
    for gpus in (1, 2, 8):
        good.shape("H100-80GB-SXM", 8, 1, gpus)
    assert good.step_notes() and not any(n.startswith("host-bound") for n in good.step_notes())
    assert any(n.startswith("host floor: a step takes at least") for n in good.step_notes())


def test_estimate_says_when_the_host_bounds_the_step(capsys):
    from gpuwise.cli.main import main

    args = ["estimate", "--model", "gpt2", "--gpu", "H100-80GB-SXM", "--gpus", "1", "--batch-size", "8",
            "--seq-len", "1024", "--tokens", "1e8"]
    assert main(args) == 0
    assert "host-bound" in capsys.readouterr().out
    assert main(args + ["--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["host_s"] == pytest.approx(out["step_time_s"])
    assert any(a.startswith("host-bound") for a in out["assumptions"])


def test_plan_reports_each_candidates_host_floor(tmp_path, capsys):
    import json

    from gpuwise.cli.main import main

    job = tmp_path / "small.yaml"
    job.write_text("name: small\nmodel: gpt2\ntraining: {tokens: 1.0e+8, seq_len: 1024, global_batch: 8}\n"
                   "constraints: {gpus: [H100-80GB-SXM], max_gpus: 8}\n")
    assert main(["plan", str(job), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    chosen = out["chosen"]
    assert chosen["cp"] == 1 and chosen["host_s"] is not None and chosen["host_s"] > 0
    assert chosen["step_time_s"] >= chosen["host_s"] * (1 - 1e-4)


@pytest.mark.parametrize("preset,precision,recompute,lora", [
    ("llama-3.1-8b", "bf16-mixed", "none", 0), ("qwen2.5-0.5b", "bf16", "full", 0), ("gpt2", "bf16-mixed", "full", 8)])
def test_hf_stacks_count_transformers_own_models(preset, precision, recompute, lora):
    """hf-trainer runs transformers' models: a real 3-layer transformers step (its own loss and gradient
    checkpointing; a frozen base with input gradients, as PEFT) dispatches what the table predicts for it."""
    from gpuwise.estimate.host_ops import count_step
    from gpuwise.validation import host_ops_hf

    spec = counting._tiny(load_model(preset), 3)
    real, _ = host_ops_hf.count(preset, 3, precision, recompute == "full", lora > 0)
    cfg = TrainingConfig(micro_batch=1, seq_len=16, precision=precision, recompute=recompute, stack="hf-trainer",
                         lora_rank=lora, lora_targets="q,v")
    got = count_step(spec, cfg)
    adapters = 0.0                  # the adapters' own ops are gpuwise.nn's (the real step here has none)
    if lora:
        from gpuwise.estimate.host_ops import _row
        from gpuwise.estimate.lora import adapted_linears

        row, code, _ = _row(spec, cfg)
        assert code == "transformers"
        adapters = 3 * adapted_linears(spec, "q,v") * (row.lora_target_ops + row.lora_recompute_target_ops)
    assert got.ops - got.optimizer_ops - adapters == pytest.approx(real, rel=0.01)
    assert got.ops > count_step(spec, replace(cfg, stack="pytorch")).ops      # transformers dispatches more
