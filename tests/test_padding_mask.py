"""The padding-mask lever (--padding-mask, training.padding_mask): Hugging Face models under sdpa given an attention
mask with zeros get a 4D additive mask, so PyTorch's memory-efficient kernel computes every key tile and reads the
mask per head, and the mask is kept through the step."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpuwise.cli.main import main
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.op_inventory import ATTN, micro_step_work, op_table
from gpuwise.estimate.step_time import analytical_step_time
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model
from gpuwise.workload.training import TrainingConfig

SPEC = load_model("llama-3.1-8b")
CFG = TrainingConfig(micro_batch=2, seq_len=8192, precision="bf16", recompute="full")


def _json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_attention_computes_every_tile_and_reads_the_mask():
    tab = op_table(SPEC)
    att = tab.cls == ATTN
    causal, masked = (micro_step_work(tab, 2, 8192, masked=m) for m in (False, True))
    # every key per query instead of the causal tiles: 8192 / ((8192 + 128) / 2) of the score FLOPs
    ratio = masked.flops[att, 0].sum() / causal.flops[att, 0].sum()
    assert 1.9 < ratio < 8192 / ((8192 + 128) / 2) + 1e-9
    # the mask (2 B per query, key and head) read once forward, by the one attention row
    assert att.sum() == 1
    extra = masked.bytes[att, 0].sum() - causal.bytes[att, 0].sum()
    assert extra == pytest.approx(2 * 8192 * SPEC.n_heads * 8192 * 2)
    assert (masked.flops[~att] == causal.flops[~att]).all()


def test_step_is_slower_and_says_why():
    gpu = get_gpu("H100-80GB-SXM")
    plain, masked = (analytical_step_time(SPEC, replace(CFG, padding_mask=m), gpu) for m in (False, True))
    assert masked.step_time_s > plain.step_time_s * 1.1
    assert any(a.startswith("padding mask:") and "every key tile" in a for a in masked.assumptions)
    assert not any(a.startswith("padding mask:") for a in plain.assumptions)


def test_memory_keeps_the_mask_in_both_methods(capsys):
    from gpuwise.trace.memory import trace_memory  # noqa: F401 (the trace method needs torch)

    mask_gib = 2 * 8192 * 8192 * 2 / 2 ** 30
    base = ["memory", "llama-3.2-1b", "--seq-len", "8192", "--batch-size", "2", "--precision", "bf16",
            "--recompute", "full", "--gpu", "H100-80GB-SXM"]
    off, on = _json(capsys, *base), _json(capsys, *base, "--padding-mask")
    assert on["config"]["padding_mask"] and not off["config"]["padding_mask"]
    assert on["allocated_gib"] - off["allocated_gib"] == pytest.approx(mask_gib, abs=0.01)
    assert any(a.startswith("padding mask: 0.25 GiB") for a in on["assumptions"])
    t_off, t_on = (_json(capsys, *base, "--method", "trace", *flag) for flag in ((), ("--padding-mask",)))
    assert t_on["allocated_gib"] - t_off["allocated_gib"] == pytest.approx(mask_gib, abs=0.01)
    assert any("built by the traced model" in a and "padding mask" in a for a in t_on["assumptions"])


def test_autocast_keeps_a_16_bit_cast_of_the_mask_per_layer():
    """Mixed precision over float32 weights: the mask is float32 (the input embeddings' dtype) and every attention
    call casts it to 16-bit (autocast casts all of scaled_dot_product_attention's floating inputs), which the kernel
    keeps for that layer's backward. The analytic estimate and the trace (which builds the mask) agree on it."""
    from gpuwise.estimate.memory import padding_mask_bytes, padding_mask_copy_bytes
    from gpuwise.trace.memory import trace_memory
    from gpuwise.workload.model_spec import ModelSpec

    spec = ModelSpec(name="mask-peak", family="llama", n_layers=3, hidden=256, n_heads=4, n_kv_heads=4,
                     head_dim=64, ffn_hidden=688, vocab_size=256, max_seq_len=4096, gated_mlp=True, norm="rmsnorm")
    cfg = TrainingConfig(micro_batch=2, seq_len=2048, precision="bf16-mixed", recompute="none")
    on = replace(cfg, padding_mask=True)
    assert padding_mask_bytes(on) == 2 * 2048 * 2048 * 4 and padding_mask_copy_bytes(on) == 2 * 2048 * 2048 * 2
    analytic = estimate_memory(spec, on).allocated - estimate_memory(spec, cfg).allocated
    traced = trace_memory(spec, on).peak_allocated_bytes - trace_memory(spec, cfg).peak_allocated_bytes
    assert analytic == pytest.approx(padding_mask_bytes(on) + 3 * padding_mask_copy_bytes(on))
    assert traced == pytest.approx(analytic, rel=0.05)
    # full recompute: only the re-run block's cast is made again; LoRA's 16-bit frozen stream: a 16-bit mask, no cast
    full = replace(on, recompute="full")
    assert estimate_memory(spec, full).activations < estimate_memory(spec, on).activations
    assert padding_mask_copy_bytes(replace(on, lora_rank=8)) == 0


def test_refused_for_an_explicit_model(capsys):
    assert main(["memory", "resnet50", "--padding-mask"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "padding-mask" in err[0] and "transformers only" in err[0]


def test_job_spec_and_flags_give_the_same_answer(capsys):
    from gpuwise.estimate.job_space import space_from_jobspec
    from gpuwise.workload.jobspec import parse_job

    space = space_from_jobspec(parse_job({"name": "t", "model": "llama-3.2-1b", "training": {
        "seq_len": 4096, "global_batch": 8, "tokens": 1e8, "padding_mask": True}}))
    assert space.base.padding_mask
    est = estimate_memory(load_model("llama-3.2-1b"), replace(space.base, micro_batch=1, seq_len=4096))
    flags = _json(capsys, "memory", "llama-3.2-1b", "--seq-len", "4096", "--padding-mask",
                  "--precision", space.base.precision, "--recompute", space.base.recompute)
    assert flags["allocated_gib"] == pytest.approx(est.allocated / 2 ** 30, abs=1e-3)


def test_the_mask_follows_each_framework_s_dtypes_and_stack_code(capsys):
    """One rule for the mask's bytes, the layout's own (memory._precision_flags): DeepSpeed ZeRO-1/2 and FSDP run a
    16-bit model (a 16-bit mask, no per-layer cast), plain autocast a float32 one and its casts; a stack that runs its
    own model code (Megatron, llm.c, ...) has no Hugging Face mask and is refused in one line."""
    from gpuwise.estimate.memory import padding_mask_parts
    from gpuwise.workload.training import ParallelPlan

    spec = load_model("llama-3.2-1b")
    base = TrainingConfig(micro_batch=1, seq_len=4096, precision="bf16-mixed", recompute="none", padding_mask=True)
    per = 4096 * 4096
    for plan, want in ((ParallelPlan(dp=8, zero=2), (2 * per, 0)), (ParallelPlan(dp=8, zero=3), (2 * per, 0)),
                       (ParallelPlan(), (4 * per, 2 * per))):
        cfg = replace(base, stack="deepspeed" if plan.zero == 2 else "pytorch", plan=plan)
        assert padding_mask_parts(cfg) == want, plan
        delta = estimate_memory(spec, cfg).activations - estimate_memory(spec, replace(cfg, padding_mask=False)).activations
        assert delta == pytest.approx(want[0] + spec.n_layers * want[1]), plan
    assert main(["memory", "llama-3.2-1b", "--stack", "megatron", "--padding-mask"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "padding-mask" in err[0] and "own model code" in err[0]
