"""The estimator against the bundled measured rows (gpuwise/data/measured/).

Targets: median absolute error <= 8% over compared rows (Frenzy reports > 92% accuracy, papers.md
E.5); Korthikanti et al. 2022 Fig. 1 activation rows within 4% (the paper's own formula, plus
embedding-dropout masks the estimator adds); every row accounted for (compared, checked or not
modelled with a reason); the overhead constant equals its least-squares calibration."""

from __future__ import annotations

import csv
import statistics

import pytest

from gpuwise.data import data_path
from gpuwise.estimate import overhead
from gpuwise.estimate.memory import estimate_memory
from gpuwise.validation.memory import calibrate_overhead, slack_rows, validate_memory
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig


@pytest.fixture(scope="module")
def report():
    return validate_memory()


def test_consistency_checks_within_target(report):
    # formula-derived (Korthikanti) and in-sample rows: consistency checks, never the headline
    n, med, _ = report.consistency()
    assert n >= 30 and med <= 0.08


def test_headline_is_external_measured_rows_per_stack(report):
    n, med, mx = report.headline()
    ext = [r for r in report.rows if r.kind == "external" and r.error is not None]
    assert n == len(ext) >= 25 and all(r.kind == "external" for r in ext)
    assert not any(r.kind == "external" for r in report.rows if r.source.startswith(("allocator", "megatron_korth")))
    stacks = report.by_stack()
    # each row is filed under the stack its estimate used: hf-trainer = the HF-docs BERT rows and the Vertex
    # OpenLLaMA-7B PEFT rows; universal-llm-trainer = its own (transformers models in its own loop, which syncs
    # every micro-batch); ms-swift = its Jan-2024 (23 Qwen-7B + 25 Qwen-1.8/14/72B and Yi-6/34B, + 5 GPTQ) and
    # Dec-2023 (18, + 2 GPTQ) runs
    assert stacks["litgpt"][0] >= 20 and stacks["hf-trainer"][0] == 2 + 7 and stacks["pytorch"][0] >= 4
    assert stacks["universal-llm-trainer"][0] == 54
    assert stacks["ms-swift"][0] == 48 + 5 + 18 + 2
    assert sum(v[0] for v in stacks.values()) == n and med <= mx
    sources = report.by_source()
    assert sum(v[0] for v in sources.values()) == n
    assert sources["vertex_openllama7b_lora_qlora_a100_40g.csv"][0] == 7      # rows #1/#2 restate #4/#6: counted once
    checks = report.checks()
    assert checks["unsloth_readme_max_context.csv"][0] == 18 and checks["litgpt_config_hub_finetune.csv"] == (7, 7)
    # ms-swift: the repeated qwen-7b-chat LoRA baseline counts once; readings at the device's capacity are checks
    swift = [r for r in report.rows if r.source.startswith("ms_swift")]
    # (the third Jan-2024 check is Yi-34B LoRA at 4096 tokens, read at the card's capacity)
    # (5 + 1 in Jan-2024: the qwen-14b-chat LoRA baseline also appears twice); the fourth Jan-2024 check is Qwen-72B
    # on its GPTQ Int8 base, read at the card's capacity
    assert sum("counted once" in r.note for r in swift) == 5 + 1 + 5 and checks["ms_swift_benchmark_a100.csv"][0] == 4
    assert sources["ms_swift_benchmark_a100.csv"][0] == 48 + 5
    assert sources["ms_swift_benchmark_a100_2023_12.csv"][0] == 18 + 2
    assert checks["ms_swift_benchmark_a100_2023_12.csv"][0] == 2     # full fine-tune at 4096 (at capacity), 8192 OOM
    # universal-llm-trainer: rows of models with a preset are compared (its readout: memory_reserved()/1E9 GB,
    # converted) or checked: its Gemma 2 9B QLoRA OOMs on the H100 and A100, and the four 8B full runs on those 80 GB
    # cards whose same run reserved 89 GB on its 96 GB card (capacity-bound: the reading is a lower bound)
    assert sources["universal_llm_trainer_gpu_test.csv"][0] == 54 and checks["universal_llm_trainer_gpu_test.csv"][0] == 6
    ult = [r for r in report.rows if r.source.startswith("universal_llm_trainer")]
    bound = [r for r in ult if "larger card" in r.case]
    assert len(bound) == 4 and all(" 8B Full" in r.source and r.status == "checked" for r in bound)
    assert all("reserved_gib" in r.note for r in ult if r.status == "compared")
    assert any("fitted on" in a and "allocator_reserved_vs_allocated.csv" in a for a in report.assumptions)


def test_ms_swift_dec_2023_run_is_its_own_source(report):
    # the doc's first run (cfcb6726): its own source, never fitted on; its batch rows (truncation_left, most samples
    # fill 2048 tokens) grow from batch 1 to 8 by +34.65 GiB measured, the estimate by 12% less: the traced tensors
    # grow by 27.95 GiB and the measured slack from 2% to 15% of them, which a fraction of the allocated peak
    # does not follow (the simulated allocator of `validate memory --simulate-allocator` does: 0.1-0.2% per row)
    dec = [r for r in report.rows if r.source.startswith("ms_swift_benchmark_a100_2023_12.csv")]
    assert len(dec) == 27 and all(r.kind == "external" for r in dec)
    batch = {int(r.source.split(" batch ")[1].split()[0]): r for r in dec
             if r.status == "compared" and " lora none len 2048 " in r.source and "FA true GC true r8 DEFAULT" in r.source}
    assert sorted(batch) == [1, 2, 4, 8]
    grow_measured = batch[8].measured - batch[1].measured
    grow_predicted = batch[8].predicted - batch[1].predicted
    assert abs(grow_measured - 34.65) < 0.01 and abs(grow_predicted - grow_measured) / grow_measured < 0.15
    oom = [r for r in dec if r.case.startswith("OOM")]
    assert len(oom) == 1 and oom[0].measured is None and oom[0].predicted is not None


def test_every_measured_row_is_accounted_for(report):
    n = 0
    for path in sorted(data_path("measured").glob("*.csv")):
        with open(path, newline="") as f:
            n += sum(1 for _ in csv.DictReader(line for line in f if not line.startswith("#")))
    assert len([r for r in report.rows if r.kind != "loso"]) == n
    for r in report.rows:
        assert r.status in ("compared", "checked", "not modelled")
        if r.status == "not modelled":
            assert r.note and r.predicted is None
        if r.status == "checked":     # consistency checks pass; an external check is reported either way
            assert r.passed is True or (r.kind == "external" and r.passed is False), r


def test_litgpt_reading_below_its_model_states_is_left_out(report):
    """LitGPT's llama-3.2-1b full fine-tune reads 8.70 GB, below the 1.5B parameters x 8 B (bf16 weights, gradients,
    two AdamW moments; untied lm_head at 00af8b0d) that exist after its first step: said, not compared. Exactly the
    three one-GPU full fine-tunes whose readings are below their states are left out; the rest are compared."""
    rows = [r for r in report.rows if r.source.startswith("litgpt_config_hub")]
    odd = {r.source.split(" ", 1)[1] for r in rows if "below its own configuration's model states" in r.note}
    assert odd == {"llama-3.2-1b full 1xA10G", "llama-3.2-3b full 1xA10G", "Phi-3-mini-4k-instruct full 1xA10G"}
    one = next(r for r in rows if r.source.endswith("llama-3.2-1b full 1xA10G"))
    assert one.status == "not modelled" and one.measured == 8.7 and one.predicted is None
    assert "1,498,482,688 parameters x 8 B" in one.note and "= 11.99 GB" in one.note
    assert sum(r.status == "compared" for r in rows) == 48


def test_megatron_activation_rows_close(report):
    rows = [r for r in report.rows if "fig1" in r.source and r.case == "activations per GPU"]
    assert len(rows) == 8
    # < 4% before selective recompute counted the attention scores it re-materialises in one layer's backward
    # (eager attention, as in the paper): the figure's stored activations omit them (22B, tp 8: +6.6%)
    assert max(abs(r.error) for r in rows) < 0.07
    assert sorted(abs(r.error) for r in rows)[-2] < 0.04


def test_bert_device_totals_close(report):
    # out-of-sample since the slack fraction is fitted on the allocator rows: -4% and +12%
    rows = [r for r in report.rows if r.source.startswith("hf_transformers")]
    assert len(rows) == 2 and all(abs(r.error) < 0.15 for r in rows)


def test_allocator_rows_fit_residuals(report):
    rows = [r for r in report.rows if r.source.startswith("allocator_reserved") and r.kind != "loso"]
    fit = [r for r in rows if r.status == "compared"]
    assert len(fit) == 33 and len({r.source.split("(")[1] for r in fit}) >= 10
    errs = sorted(abs(r.error) for r in fit)
    # in-sample; the largest are the smallest models (esm2 8M LoRA: 0.72 GiB allocated, 1.95 reserved)
    assert errs[len(errs) // 2] < 0.10 and errs[-1] < 0.60
    assert all(r.passed for r in rows if r.status == "checked")


def test_oom_rows_predicted_not_to_fit(report):
    oom = [r for r in report.rows if r.status == "checked" and "OOM" in r.case and r.source.startswith("peft")]
    assert len(oom) == 2 and all(r.predicted > 80 for r in oom)


def test_overhead_constants_are_the_calibration():
    f = calibrate_overhead()
    assert set(f) == set(overhead.SLACK_GROUPS)
    for group, slack in overhead.SLACK.items():
        assert slack.fraction == pytest.approx(f[group].fraction, abs=0.001)
        assert slack.gib == pytest.approx(f[group].gib, abs=0.001)
    rows = slack_rows()
    for group in overhead.SLACK_GROUPS:
        assert sum(r.group == group for r in rows) == overhead.CALIBRATION_ROWS[group]
        assert len({r.source for r in rows if r.group == group}) == overhead.CALIBRATION_SOURCES[group]


def test_overhead_states_its_leave_one_source_out_errors(report):
    loso = [r for r in report.rows if r.kind == "loso"]
    public = [abs(r.error) for r in loso if not r.source.startswith("gpu_runs")]
    grid = [abs(r.error) for r in loso if r.source.startswith("gpu_runs")]
    assert statistics.median(public) == pytest.approx(overhead.LOSO_MEDIAN["public"], abs=0.001)
    assert statistics.median(grid) == pytest.approx(overhead.LOSO_MEDIAN["grid"], abs=0.001)


def test_slack_by_ranks_and_stack():
    """More than one rank (collectives on NCCL streams) and DeepSpeed's engine on one GPU keep more slack than a
    plain loop on one GPU, whatever else the stack; the slack is a fraction of the allocated peak plus fixed
    GiB per GPU."""
    several, one, ds = (overhead.SLACK[g] for g in ("several GPUs", "one GPU", "one GPU, DeepSpeed"))
    assert overhead.slack_terms(True, "pytorch") == overhead.slack_terms(True, "hf-trainer") == several
    assert overhead.slack_terms(False, "pytorch") == overhead.slack_terms(False, "hf-trainer") == one
    assert overhead.slack_terms(False, "deepspeed") == ds
    assert one.fraction < several.fraction and one.fraction < ds.fraction and one.gib > 0
    one_gpu, two = (estimate_memory(load_model("llama-2-7b"), TrainingConfig(
        micro_batch=1, seq_len=2048, plan=ParallelPlan(dp=g, zero=3 if g > 1 else 0))) for g in (1, 2))
    assert one_gpu.allocator == pytest.approx(one.fraction * one_gpu.allocated + one.gib * overhead.GIB)
    assert two.allocator == pytest.approx(several.fraction * two.allocated + several.gib * overhead.GIB)


def test_h200_grid_reserved_within_bound():
    """The H200 grid (in-sample for the one-GPU fraction): the reserved peak within 6% median, 17% at most (the
    single 23.5% fraction over-predicted it by 14% median, 23% at most); allocated is unaffected."""
    from gpuwise.validation.gpu_runs import compare, summary

    rows = compare("grid")
    res, alloc = summary(rows, "reserved"), summary(rows, "allocated")
    assert res["rows"] == 28 and res["median_abs_error"] < 0.06 and res["max_abs_error"] < 0.17
    assert alloc["median_abs_error"] < 0.01


def test_allocator_slack_leave_one_source_out(report):
    """The memory constants fitted on measured rows are scored on each source's rows with that source left out
    of its fit (the H200 grid as one source); those rows stay out of both the headline and the consistency
    summary."""
    loso = [r for r in report.rows if r.kind == "loso"]
    fit_rows = [r for r in report.rows if r.kind == "in-sample" and r.status == "compared"]
    assert len(fit_rows) == 33 and len(loso) == 33 + 28
    n, med, mx = report.loso()
    assert n == 61 and med is not None and mx >= med
    # each held-out source's refit differs from the others' (11 sources: 10 public repositories and the H200 grid)
    assert len({r.note for r in loso}) == 11
    public = sorted(abs(r.error) for r in loso if not r.source.startswith("gpu_runs"))
    grid = sorted(abs(r.error) for r in loso if r.source.startswith("gpu_runs"))
    # a fraction alone (no fixed GiB) scored 5.9% median on the public rows but 11.6% / 20.0% on the grid
    # the largest: the esm2 8M LoRA run (0.72 GiB allocated, 1.95 reserved)
    assert len(public) == 33 and statistics.median(public) < 0.09 and public[-1] < 0.65
    assert len(grid) == 28 and statistics.median(grid) < 0.05 and grid[-1] < 0.17


def test_rows_of_the_added_presets_are_scored_and_the_rest_say_why(report):
    rows = [r for r in report.rows if r.source.startswith(("litgpt_config_hub", "universal_llm", "ms_swift"))]
    # config-hub names that are not preset names resolve (tiny-llama, mistral-7b-v0.2 = the mistral-7b spec)
    for model in ("tiny-llama", "mistral-7b-v0.2", "Phi-3-mini-4k-instruct", "stablelm-base-alpha-3b", "phi-2",
                  "llama-3.2-3b", "Phi3-mini (3.8B)", "Qwen 3 8B", "qwen-1_8b-chat", "yi-6b-chat", "Gemma 2 9B",
                  "gemma-2-9b"):
        mine = [r for r in rows if f" {model} " in r.source]
        # (LitGPT's one-GPU full fine-tunes of llama-3.2-3b and Phi-3 read below their own model states: said)
        assert mine and all(r.status in ("compared", "checked") or "below its own configuration" in r.note
                            for r in mine), model
        assert any(r.status == "compared" for r in mine), model
    gemma2 = [r for r in rows if "Gemma 2 9B" in r.source or "gemma-2-9b" in r.source]
    assert len(gemma2) == 12 and all("soft-capping" in r.note or "soft-capped" in r.note for r in gemma2)
    alibi = [r for r in rows if "baichuan2-13b-chat" in r.source]
    assert alibi and all("ALiBi" in r.note for r in alibi)
    # Qwen-14B/72B rows a gpuwise layout or base cannot express keep that reason, not a missing preset
    big = [r for r in rows if " qwen-72b-chat " in r.source or " qwen-14b-chat " in r.source]
    assert big and not any("no gpuwise preset" in r.note for r in big)
    assert any(r.status == "compared" for r in big) and any("GPTQ" in r.note for r in big)


def test_reserved_rows_are_split_by_how_their_batch_lengths_vary(report):
    """The fitted slack is a fixed-length step's: rows say whether their batches were fixed (packed, or nearly every
    sample fills max_length) or padded to lengths that vary, and the summary scores the two apart."""
    ext = [r for r in report.rows if r.kind == "external" and r.error is not None]
    tag = {r.source: r.lengths for r in ext}
    assert all(v == "varying" for k, v in tag.items() if k.startswith("ms_swift_benchmark_a100.csv"))
    dec = {k: v for k, v in tag.items() if k.startswith("ms_swift_benchmark_a100_2023_12.csv")}
    assert all(v == ("fixed" if int(k.split(" len ")[1].split()[0]) <= 2048 else "varying") for k, v in dec.items())
    assert {v for k, v in tag.items() if k.startswith("universal_llm")} == {"fixed"}
    assert {v for k, v in tag.items() if k.startswith("litgpt_config_hub")} == {"n/a"}     # allocated peaks
    split = report.by_lengths()
    assert sum(n for n, _, _ in split.values()) == sum(r.lengths != "n/a" for r in ext)
    # varying lengths ratchet the reserve up beyond a fixed-length step's slack: under-predicted, by more
    assert split["varying"][1] > split["fixed"][1]
    assert statistics.median(r.error for r in ext if r.lengths == "varying") < 0


def test_every_external_compared_row_says_how_its_batch_lengths_vary(report):
    """A row added without a lengths tag would fall out of (or into the wrong bucket of) the fixed/varying split."""
    untagged = [r.source for r in report.rows if r.kind == "external" and r.error is not None and r.lengths is None]
    assert untagged == []
