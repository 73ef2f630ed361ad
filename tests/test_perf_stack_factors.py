"""Per-stack kernel efficiency factors (calibration/stack_efficiency.csv) fitted on the external measured rows
(calibration/external_throughput.csv: InternEvo, llm.c, universal-llm-trainer; ms-swift as ratios only), scored
leave-one-source-out; stacks without rows fall back to the stated default and say so."""

import dataclasses

import numpy as np
import pytest

from gpuwise.data import data_path, read_commented_csv
from gpuwise.estimate.roofline_step import (
    base_efficiency,
    op_efficiency_for,
    stack_factor,
)
from gpuwise.estimate.step_time import analytical_step_time
from gpuwise.hardware.gpus import get_gpu
from gpuwise.validation import stack_efficiency as se
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig

HELD_BACK = ("torchtitan", "llm-foundry", "resource-tables", "sia", "torchtune/README", "fsdp_qlora", "nanotron",
             "ultra-scale", "bigscience")

def _estimate(stack, **kw):
    cfg = TrainingConfig(micro_batch=2, seq_len=4096, stack=stack, plan=ParallelPlan(dp=8, zero=1), **kw)
    return analytical_step_time(load_model("llama-3.1-8b"), cfg, get_gpu("A100-80GB"), 8)

def test_unfitted_stack_falls_back_to_the_stated_default_and_says_so():
    f = stack_factor("litgpt")
    assert f.factor == 1.0 and f.points == 0
    lit, pt = _estimate("litgpt"), _estimate("pytorch")
    text = " ".join(lit.assumptions)
    assert "no litgpt rows are measured: default factor 1" in text
    # same kernels as the pytorch row it names (stacks.csv): only its memory defaults may differ
    assert op_efficiency_for(get_gpu("A100-80GB"), "litgpt").gemm == op_efficiency_for(get_gpu("A100-80GB"), "pytorch").gemm
    assert lit.step_time_s == pytest.approx(pt.step_time_s, rel=0.05)

def test_fitted_stack_scales_gemm_and_attention_and_names_its_rows():
    f = stack_factor("internevo")
    assert f.points > 0 and "internevo" in f.sources
    eff, base = op_efficiency_for(get_gpu("A100-80GB"), "internevo"), base_efficiency("Ampere", "internevo")
    assert eff.gemm == pytest.approx(min(0.95, base.gemm * f.factor))
    assert eff.attention == pytest.approx(min(0.95, base.attention * f.factor))
    assert eff.memory == base.memory and eff.launch_s == base.launch_s
    assert f"stack factor fitted on {f.points} measured internevo rows" in " ".join(_estimate("internevo").assumptions)

def test_stored_factors_follow_the_rule_on_the_named_rows():
    """Re-running the rule on the bundled rows gives the stored factors (the CSV is the rule's output), and the
    median signed log error of each stack's rows under its factor is ~0 (the rule's definition)."""
    fits = se.fitted_factors()
    assert set(fits) == {"internevo", "llm.c", "universal-llm-trainer"}
    for stack, (k, rows) in fits.items():
        assert stack_factor(stack).factor == pytest.approx(k, abs=0.002)
        assert stack_factor(stack).points == len(rows)
        logs = [np.log(se.predict_with_factor(r, k) / r.tokens_per_s_per_gpu) for r in rows]
        assert abs(np.median(logs)) < 0.01

def test_leave_one_source_out_never_sees_the_scored_source():
    loso = se.loso_errors()
    assert {e.run.source for e in loso} == {"internevo", "llm.c", "universal-llm-trainer"}
    # each of these stacks has one source: its out-of-sample prediction is the unfitted default
    assert all(e.how == "loso-default" and e.factor == 1.0 for e in loso)
    # with a second source of the same stack the factor comes from that source only
    runs = se.external_runs()
    fake = [r.__class__(**{**r.__dict__, "source": "other"}) for r in runs if r.source == "llm.c"][:2]
    mixed = se.loso_errors(list(runs) + fake)
    k_other = se.fit_stack_factor(fake)
    assert all(e.factor == pytest.approx(k_other) for e in mixed if e.run.source == "llm.c")

def test_ms_swift_is_only_used_as_ratios():
    assert not any(r.source == "ms-swift" for r in se.external_runs())
    ratios = se.ratio_checks()
    assert len(ratios) > 30 and all(c.source == "ms-swift-ratio" for c in ratios)
    grad_accum = [c for c in ratios if c.case.startswith("qwen-7b-chat lora r8 q,k,v len2048 mb1 acc")
                  and "no-" not in c.case]
    assert len(grad_accum) == 6
    assert grad_accum and all(c.error < 0.02 for c in grad_accum)     # measured flat, predicted flat

def test_lora_adapters_cost_time_growing_with_their_targets():
    """Unmerged adapters move activations (memory-bound): all-linear costs more than q,v, both more than none of
    the frozen GEMM savings would suggest (ms-swift: all-linear at 0.75x the samples/s of the qkv adapter)."""
    full = _estimate("pytorch", recompute="full")
    qv = _estimate("pytorch", recompute="full", lora_rank=8)
    allin = _estimate("pytorch", recompute="full", lora_rank=8, lora_targets="all-linear")
    assert allin.step_time_s > qv.step_time_s and qv.step_time_s < full.step_time_s

def test_external_rows_carry_attribution_and_no_held_back_source():
    rows = read_commented_csv(data_path("calibration", "external_throughput.csv"))
    assert len(rows) > 100
    for r in rows:
        assert " @ " in r["ref"] and len(r["ref"].split(" @ ")[1]) >= 7, r["ref"]
        assert not any(h in r["ref"].lower() for h in HELD_BACK), r["ref"]
    with open(data_path("calibration", "stack_efficiency.csv")) as fh:
        stacks = [ln.split(",")[0] for ln in fh if not ln.startswith("#")][1:]
    assert "default" in stacks
    from gpuwise.workload.stacks import stack_names

    assert set(stacks) - {"default"} <= set(stack_names())


def test_long_sequence_attention_is_more_efficient_and_says_so():
    """Flash-attention efficiency grows with the keys per query tile (fixed cost per tile): a 1B-class model at 64k
    tokens is timed with a higher attention rate than at 4k, a 512-token one with a lower; causal work counts the
    diagonal tiles."""
    from gpuwise.estimate.op_inventory import attended_keys
    from gpuwise.estimate.roofline_step import attention_scale

    scales = [attention_scale(s, True) for s in (512, 2048, 4096, 32768, 65536)]
    assert scales == sorted(scales) and scales[2] == pytest.approx(1.0) and 1.05 < scales[-1] < 1.2
    assert attended_keys(65536, True) == pytest.approx(65536 / 2, rel=0.01) and attended_keys(128, True) == 128
    spec = load_model("llama-3.1-8b")
    small = dataclasses.replace(spec, name="small", n_layers=16, hidden=2048, n_heads=16, n_kv_heads=8, head_dim=128,
                                ffn_hidden=8192)
    est = analytical_step_time(small, TrainingConfig(micro_batch=1, seq_len=65536, plan=ParallelPlan(dp=8)),
                               get_gpu("H100"), 8)
    assert any(a.startswith("flash attention at 65,536 tokens: 1.11x") for a in est.assumptions)


def test_calibration_loso_transfers_a_pair_left_without_rows():
    """Leaving out Korthikanti (the only Ampere megatron fit rows) refits without them; the pair's GEMM efficiency
    then comes from the three fitted pairs around it, never from the optimiser's starting point."""
    from dataclasses import replace as swap

    from gpuwise.validation.steptime_fit import fit_op_efficiency, measured_runs

    runs = [swap(r, split="heldout") if r.source == "korthikanti-tab5" else r for r in measured_runs()]
    effs = fit_op_efficiency(runs)
    am = effs["Ampere", "megatron"]
    assert am.points == 0 and "transferred" in am.fitted_on
    expect = effs["Hopper", "megatron"].gemm * effs["Ampere", "pytorch"].gemm / effs["Hopper", "pytorch"].gemm
    assert am.gemm == pytest.approx(min(0.92, expect))


def test_async_tp_overlaps_only_inside_a_node_and_keeps_one_chunk_exposed():
    from gpuwise.estimate.roofline_step import tp_exposed_s

    assert tp_exposed_s(1.0, 5.0, 8, False) == 1.0                       # no AsyncTP: all exposed
    assert tp_exposed_s(1.0, 5.0, 8, True) == pytest.approx(1 / 8)        # hidden but the pipeline fill
    assert tp_exposed_s(3.0, 1.0, 4, True) == pytest.approx(2.0 + 0.75)   # comm-bound: the excess stays
    l70 = load_model("llama-3.1-70b")
    h100 = get_gpu("H100")

    def est(tp, async_tp, per_node=8):
        cfg = TrainingConfig(micro_batch=1, seq_len=8192, async_tp=async_tp,
                             plan=ParallelPlan(dp=2, tp=tp, sp=True, zero=1))
        return analytical_step_time(l70, cfg, h100, per_node)

    on, off = est(8, True), est(8, False)
    assert on.comm_s < off.comm_s and "chunked by AsyncTP" in " ".join(on.assumptions)
    assert "exposed (no AsyncTP" in " ".join(off.assumptions)
    across_on, across_off = est(8, True, per_node=4), est(8, False, per_node=4)
    assert across_on.step_time_s == pytest.approx(across_off.step_time_s)
    assert "needs the TP group inside one node" in " ".join(across_on.assumptions)


def test_validate_throughput_stack_section_reports_loso_and_stored_fit_per_source():
    from gpuwise.cli.validate_throughput import _stack_section

    st = _stack_section()
    assert set(st["external_loso"]) == {"all", "internevo", "llm.c", "universal-llm-trainer"}
    assert {"korthikanti-tab5", "ibm-fsdp-blog", "dgxc-llama3.1"} <= set(st["calibration_loso"])
    assert st["external_in_sample"]["all"]["median_error"] < st["external_loso"]["all"]["median_error"]
    assert all(r["how"] == "loso-default" for r in st["runs"]) and len(st["runs"]) == 73
    assert st["factors"]["default"]["factor"] == 1.0


def test_internevo_packed_rows_attend_within_2048_tokens_and_carry_their_zero1_group():
    """pack_sample_into_one=True (InternEvo train.py @ fa7337b: PackedDatasetWithoutCuSeqlen) cuts each pack into
    seq_len pieces for flash-attn varlen: the rows are micro_bsz sequences of 2048, never one 4k-16k sequence; each
    row's ZeRO-1 group is the table's zero1 (-1 = all DP ranks)."""
    rows = [r for r in read_commented_csv(data_path("calibration", "external_throughput.csv"))
            if r["source"] == "internevo"]
    assert len(rows) == 54 and {r["seq_len"] for r in rows} == {"2048"}
    for r in rows:
        group = r["case"].split("zero1-group")[1].split()[0]
        assert int(r["zero_shard"]) == (int(r["dp"]) if group == "-1" else int(group)), r["case"]
        assert int(r["micro_batch"]) == int(r["case"].split(" mb")[1].split()[0]), r["case"]


def test_nf4_dequantisation_share_follows_its_rule_and_times_a_4bit_base():
    """NF4_DEQUANT_BW_SHARE is what fit_nf4_share computes from its two ms-swift rows (each nf4 row less its own
    16-bit LoRA row); a 4-bit base then costs its dequantisation bytes / (bandwidth x share) per micro-step, more
    with recompute (one more pass), and the estimate says so. The Vertex rows stay out of the fit."""
    from gpuwise.estimate.roofline_step import NF4_DEQUANT_BW_SHARE

    fit = se.fit_nf4_share()
    assert len(fit) == 3 and fit["fit"] == pytest.approx(NF4_DEQUANT_BW_SHARE, rel=0.01)
    assert all(k.endswith("bnb-nf4") for k in fit if k != "fit")
    checks = se.nf4_checks()
    assert {c.source for c in checks} == {"ms-swift-nf4", "vertex-nf4"}
    assert all("in-sample" in c.case for c in checks if c.source == "ms-swift-nf4")
    assert not any("in-sample" in c.case for c in checks if c.source == "vertex-nf4")
    l8, a100 = load_model("llama-3.1-8b"), get_gpu("A100-80GB")
    times = {}
    for q in (None, "nf4"):
        for rc in ("none", "full"):
            cfg = TrainingConfig(micro_batch=1, seq_len=2048, lora_rank=16, quantize=q, recompute=rc)
            times[q, rc] = analytical_step_time(l8, cfg, a100, 8)
    added = {rc: times["nf4", rc].step_time_s - times[None, rc].step_time_s for rc in ("none", "full")}
    # ~2.5 bytes per block weight per pass at 13.6% of 2.04 TB/s: tens of ms per pass on an 8B model
    assert 0.03 < added["none"] / 2 < 0.08 and added["full"] == pytest.approx(1.5 * added["none"], rel=0.05)
    assert any("NF4 base" in a and "ms per step" in a for a in times["nf4", "none"].assumptions)
    assert not any("NF4 base" in a for a in times[None, "none"].assumptions)


def test_estimate_by_flags_takes_the_model_flags_memory_takes(capsys, tmp_path):
    """`estimate --model` accepts --quantize, --offload-optimizer, --no-flash-attention and --pp-schedule as
    `memory` does (it refused them before), and refuses them next to a JOB.yaml."""
    import json

    from gpuwise.cli.main import main

    base = ["estimate", "--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--gpus", "1", "--batch-size", "1",
            "--lora-rank", "16", "--json"]
    assert main(base) == 0
    lora = json.loads(capsys.readouterr().out)
    assert main(base + ["--quantize", "nf4"]) == 0
    qlora = json.loads(capsys.readouterr().out)
    assert qlora["step_time_s"] > lora["step_time_s"] and qlora["memory_gib"]["required"] < lora["memory_gib"]["required"]
    assert main(base + ["--no-flash-attention"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_gib"]["required"] > lora["memory_gib"]["required"]
    # optimizer offload: less memory, no GPU optimizer pass, and the host's step and copies timed and stated
    assert main(base + ["--offload-optimizer"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["memory_gib"]["required"] < lora["memory_gib"]["required"] and off["optimizer_s"] == 0.0
    assert off["step_time_s"] > lora["step_time_s"]
    assert any("optimizer offload" in a and "CPU Adam step" in a for a in off["assumptions"])
    # pipeline schedules: interleaved-2 halves 1F1B's bubble, ZB-H1 a third of it, GPipe keeps more memory
    pp = ["estimate", "--model", "llama-3.1-8b", "--gpu", "H100", "--gpus", "8", "--pp", "2", "--batch-size", "1",
          "--grad-accum", "8", "--zero", "1", "--json", "--pp-schedule"]
    got = {}
    for sched in ("1f1b", "gpipe", "interleaved-2", "zb"):
        assert main(pp + [sched]) == 0
        got[sched] = json.loads(capsys.readouterr().out)
    assert got["interleaved-2"]["bubble_s"] == pytest.approx(got["1f1b"]["bubble_s"] / 2, rel=0.01)
    assert got["zb"]["bubble_s"] == pytest.approx(got["1f1b"]["bubble_s"] / 3, rel=0.01)
    assert got["gpipe"]["step_time_s"] == got["1f1b"]["step_time_s"]
    assert got["gpipe"]["memory_gib"]["required"] > got["1f1b"]["memory_gib"]["required"]
    assert any("schedule zb" in a for a in got["zb"]["assumptions"])
    spec = tmp_path / "j.yaml"
    spec.write_text("name: j\nmodel: llama-3.1-8b\ntraining: {tokens: 1.0e8, seq_len: 2048, global_batch: 8}\n")
    assert main(["estimate", str(spec), "--gpu", "H100", "--gpus", "8", "--quantize", "nf4"]) == 2
    assert "--quantize" in capsys.readouterr().err
