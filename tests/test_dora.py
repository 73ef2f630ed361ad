"""DoRA (--dora, training.dora): PEFT's and torchtune's weight-decomposed LoRA layer, counted, traced and estimated."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest

from gpuwise.cli.main import main
from gpuwise.estimate.adapter_traffic import adapter_traffic
from gpuwise.estimate.lora import adapter_params, dora_magnitudes
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.step_time import analytical_step_time
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model
from gpuwise.workload.training import TrainingConfig

SPEC = load_model("llama-3.1-8b")
LORA = TrainingConfig(micro_batch=1, seq_len=2048, precision="bf16-mixed", lora_rank=16, lora_targets="all-linear",
                      recompute="full", stack="hf-trainer", lora_dropout=0.0)
# three llama-3.2-1b blocks and a small vocabulary: traced in seconds
SMALL = dataclasses.replace(load_model("llama-3.2-1b"), n_layers=3, vocab_size=4096)


def test_magnitudes_are_trainable_parameters():
    """One magnitude per output row of every adapted linear."""
    h, f, kv = SPEC.hidden, SPEC.ffn_hidden, SPEC.n_kv_heads * SPEC.head_dim
    assert dora_magnitudes(SPEC, "all-linear") == SPEC.n_layers * (h + kv + kv + h + f + f + h)
    assert adapter_params(SPEC, 16, "all-linear", True) - adapter_params(SPEC, 16, "all-linear") == \
        dora_magnitudes(SPEC, "all-linear")


@pytest.mark.parametrize("stack, precision, dropout, recompute", [
    ("hf-trainer", "bf16-mixed", 0.0, "full"), ("hf-trainer", "bf16-mixed", 0.05, "none"),
    ("hf-trainer", "bf16", 0.05, "full"), ("torchtune", "bf16", 0.0, "none"), ("torchtune", "bf16", 0.05, "full")])
def test_trace_and_analytic_agree(stack, precision, dropout, recompute):
    """gpuwise.nn's DoRA layer (PEFT's ops; its saved tensors and counted bytes equal PEFT 0.14's own layer's) traced
    under fake tensors against the analytic estimate: the allocated peak within 8% (a consistency check of the two
    methods), never under by more than 2%."""
    from gpuwise.trace.memory import trace_memory

    cfg = TrainingConfig(micro_batch=1, seq_len=512, precision=precision, lora_rank=16, lora_targets="all-linear",
                         recompute=recompute, stack=stack, lora_dropout=dropout, dora=True)
    traced = trace_memory(SMALL, cfg).peak_allocated_bytes
    analytic = estimate_memory(SMALL, cfg).allocated
    assert -0.02 < analytic / traced - 1 < 0.08


def test_the_trace_frees_the_rebuilt_adapter_weight_by_reference_count():
    """B A rebuilt through the identity is used detached; its graph must die when the forward returns, as on a GPU,
    not when Python's cycle collector happens to run (the trace's module hooks would otherwise keep it)."""
    import gc

    from gpuwise.trace.memory import trace_memory

    cfg = TrainingConfig(micro_batch=1, seq_len=512, precision="bf16", lora_rank=16, lora_targets="all-linear",
                         recompute="full", stack="torchtune", lora_dropout=0.05, dora=True)
    gc.disable()
    try:
        off = trace_memory(SMALL, cfg).peak_allocated_bytes
    finally:
        gc.enable()
    assert off == trace_memory(SMALL, cfg).peak_allocated_bytes


def test_dora_keeps_more_and_takes_longer():
    gpu = get_gpu("A100-80GB-SXM")
    none = replace(LORA, recompute="none")
    assert estimate_memory(SPEC, replace(none, dora=True)).activations > estimate_memory(SPEC, none).activations
    base, dora = (analytical_step_time(SPEC, c, gpu) for c in (LORA, replace(LORA, dora=True)))
    assert dora.step_time_s > 1.2 * base.step_time_s
    assert any("DoRA's weight norms per forward" in a for a in dora.assumptions)
    # PEFT's dropout re-runs the frozen matmuls: slower again; torchtune's layer does not
    dropped = analytical_step_time(SPEC, replace(LORA, dora=True, lora_dropout=0.05), gpu)
    assert dropped.step_time_s > dora.step_time_s
    assert adapter_traffic(replace(LORA, dora=True)).fwd_fix[0] > 0 == adapter_traffic(LORA).fwd_fix[0]


def test_peft_dropout_keeps_the_rerun_matmul_s_weight():
    """PEFT's DoRA under dropout re-runs the frozen matmul on the dropped input: without recompute every adapted
    linear keeps a 16-bit autocast copy of its weight (beyond what dropout adds to LoRA); torchtune's layer reuses the
    frozen output."""
    def dropout_extra(cfg):
        act = {(d, p): estimate_memory(SPEC, replace(cfg, dora=d, lora_dropout=p)).activations
               for d in (False, True) for p in (0.0, 0.05)}
        return (act[True, 0.05] - act[True, 0.0]) - (act[False, 0.05] - act[False, 0.0])

    none = replace(LORA, recompute="none")
    h, f, kv = SPEC.hidden, SPEC.ffn_hidden, SPEC.n_kv_heads * SPEC.head_dim
    weights = SPEC.n_layers * 2 * (2 * h * h + 2 * h * kv + 3 * h * f)
    assert dropout_extra(none) > weights
    assert abs(dropout_extra(replace(none, stack="torchtune", precision="bf16"))) < weights / 100


@pytest.mark.parametrize("argv, field", [
    (["--stack", "litgpt"], "dora"), (["--lora-rank", "0"], "dora"), (["--tp", "2", "--gpus", "2"], "dora"),
    (["--quantize", "gptq-int4", "--precision", "fp16-mixed"], "dora"), (["--lora-targets", "all-linear,head"], "dora"),
    (["--zero", "2", "--gpus", "2"], "dora"), (["--stack", "pytorch"], "dora")])
def test_refusals_name_the_field(capsys, argv, field):
    base = ["memory", "llama-3.2-1b", "--lora-rank", "8", "--dora", "--stack", "hf-trainer"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


def test_refused_for_a_mixture_of_experts(capsys):
    assert main(["memory", "mixtral-8x7b", "--lora-rank", "8", "--dora", "--stack", "hf-trainer"]) == 2
    assert "mixture of experts" in capsys.readouterr().err


def test_job_spec_and_flags_give_the_same_answer(capsys):
    from gpuwise.estimate.job_space import space_from_jobspec
    from gpuwise.workload.jobspec import parse_job

    space = space_from_jobspec(parse_job({"name": "t", "model": "llama-3.2-1b", "training": {
        "seq_len": 2048, "global_batch": 8, "tokens": 1e8, "lora_rank": 16, "dora": True, "stack": "hf-trainer"}}))
    assert space.base.dora
    est = estimate_memory(load_model("llama-3.2-1b"), replace(space.base, micro_batch=1, grad_accum=1))
    assert main(["memory", "llama-3.2-1b", "--lora-rank", "16", "--dora", "--stack", "hf-trainer", "--seq-len", "2048",
                 "--precision", space.base.precision, "--recompute", space.base.recompute, "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)
    assert flags["allocated_gib"] == pytest.approx(est.allocated / 2 ** 30, abs=1e-3)
    assert any("DoRA (PEFT 0.14's layer" in a for a in flags["assumptions"])


def test_host_ops_count_dora_s_extra_kernels():
    """The host-bound floor counts DoRA's extra dispatches per adapted linear (the counted kernels' difference) and
    its third trainable tensor per adapter, and says what it leaves out."""
    from gpuwise.estimate.host_ops import count_step

    lora, dora = (count_step(SPEC, replace(LORA, dora=d)) for d in (False, True))
    assert dora.ops > 1.2 * lora.ops and dora.optimizer_ops > lora.optimizer_ops
    assert any("DoRA's extra ops" in n for n in dora.notes)
