"""A GPTQ frozen base (--quantize gptq-int4 | gptq-int8, training.quantize): AutoGPTQ's storage, its whole-matrix
dequantisation whose fp16 copy autograd keeps for the input's gradient, timed by the bytes its ops move."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from gpuwise.cli.main import main
from gpuwise.estimate.gptq import FORMATS
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.step_time import analytical_step_time
from gpuwise.hardware.gpus import get_gpu
from gpuwise.nn.linear import GPTQWeight
from gpuwise.workload.models import load_model, param_counts
from gpuwise.workload.training import TrainingConfig

QWEN = load_model("qwen-7b")
LORA = TrainingConfig(micro_batch=1, seq_len=2048, precision="fp16-mixed", lora_rank=8, lora_targets="q,k,v",
                      recompute="full", stack="ms-swift")


def _pack(values: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Pack `bits`-bit values into int32 along `dim` as AutoGPTQ stores them (value j of a word at bit j * bits)."""
    per = 32 // bits
    v = values.movedim(dim, 0).to(torch.int64)
    words = torch.zeros(v.shape[0] // per, *v.shape[1:], dtype=torch.int64)
    for j in range(per):
        words |= v[j::per] << (j * bits)
    words = torch.where(words >= 1 << 31, words - (1 << 32), words)
    return words.to(torch.int32).movedim(0, dim)


@pytest.mark.parametrize("name", list(FORMATS))
def test_dequantisation_decodes_the_packed_codes(name):
    """scale x (code - zero) per group of 128 inputs, from int32 words packed along the input (codes) and output
    (zero points, stored less one) dimensions."""
    fmt = FORMATS[name]
    d_out, d_in, top = 64, 256, (1 << fmt.bits) - 1
    w = GPTQWeight(d_out, d_in, fmt)
    codes, zeros = torch.randint(0, top + 1, (d_in, d_out)), torch.randint(1, top + 1, (d_in // 128, d_out))
    scales = torch.rand(d_in // 128, d_out).half()
    w.qweight.copy_(_pack(codes, fmt.bits, 0))
    w.qzeros.copy_(_pack((zeros - 1) & top, fmt.bits, 1))
    w.scales.copy_(scales)
    want = scales.float().repeat_interleave(128, 0) * (codes - zeros.repeat_interleave(128, 0)).float()
    got = w.dequantize()
    assert got.dtype == torch.float16 and got.shape == (d_in, d_out)
    assert torch.allclose(got.float(), want, rtol=1e-3, atol=1e-3 * want.abs().max().item())


def test_stored_bytes_follow_the_format():
    """Block linears at bits/8 + (bits/8 + 2)/128 B; embeddings and the output layer stay fp16."""
    int4, int8 = (estimate_memory(QWEN, replace(LORA, quantize=q)) for q in ("gptq-int4", "gptq-int8"))
    linear = QWEN.n_layers * (param_counts(QWEN).layer - param_counts(QWEN).layer_replicated)
    assert int8.parameters - int4.parameters == pytest.approx(linear * (FORMATS["gptq-int8"].bytes_per_weight
                                                                  - FORMATS["gptq-int4"].bytes_per_weight), rel=1e-6)
    assert FORMATS["gptq-int4"].bytes_per_weight == pytest.approx(0.5 + 2.5 / 128)


def test_without_recompute_every_block_keeps_its_dequantised_weights():
    """The matmul keeps the fp16 weight for the input's gradient: without recompute a GPTQ base costs more activation
    memory than a 16-bit base (which keeps nothing of its frozen weights); with full recompute only the re-run block's."""
    none = replace(LORA, recompute="none")
    plain, gptq = estimate_memory(QWEN, none), estimate_memory(QWEN, replace(none, quantize="gptq-int4"))
    linear = QWEN.n_layers * (param_counts(QWEN).layer - param_counts(QWEN).layer_replicated)
    assert gptq.activations - plain.activations == pytest.approx(2 * linear, rel=0.02)
    full = estimate_memory(QWEN, replace(LORA, quantize="gptq-int4"))
    assert full.allocated < estimate_memory(QWEN, LORA).allocated < gptq.allocated


@pytest.mark.parametrize("recompute", ["full", "none"])
def test_trace_and_analytic_agree(recompute):
    """The traced step (gpuwise.nn's GPTQ layer, AutoGPTQ's op sequence under fake tensors) and the analytic estimate
    agree on the allocated peak (a consistency check of the two methods)."""
    from gpuwise.trace.memory import trace_memory

    spec = load_model("llama-3.2-1b")
    cfg = replace(LORA, stack="hf-trainer", lora_targets="q,v", recompute=recompute, quantize="gptq-int4", seq_len=512)
    traced = trace_memory(spec, cfg).peak_allocated_bytes
    assert estimate_memory(spec, cfg).allocated == pytest.approx(traced, rel=0.04)


def test_dequantisation_is_timed_per_forward():
    """Each forward and re-run forward dequantises every block matrix; 8-bit moves more bytes than 4-bit."""
    gpu = get_gpu("A100-80GB-SXM")
    base = analytical_step_time(QWEN, LORA, gpu).step_time_s
    t4, t8 = (analytical_step_time(QWEN, replace(LORA, quantize=q), gpu) for q in ("gptq-int4", "gptq-int8"))
    assert base < t4.step_time_s < t8.step_time_s
    assert any("GPTQ 4-bit base" in a and "not fitted on GPTQ runs" in a for a in t4.assumptions)
    none = replace(LORA, quantize="gptq-int4", recompute="none")
    saved = analytical_step_time(QWEN, replace(LORA, recompute="none"), gpu).step_time_s
    assert analytical_step_time(QWEN, none, gpu).step_time_s - saved < t4.step_time_s - base


@pytest.mark.parametrize("argv, field", [
    (["--stack", "torchtitan", "--precision", "bf16-mixed"], "quantize"),
    (["--precision", "bf16"], "precision"),
    (["--tp", "2", "--gpus", "2"], "quantize"),
    (["--zero", "3", "--gpus", "2"], "quantize"),
])
def test_refusals_name_the_field(capsys, argv, field):
    base = ["memory", "llama-3.2-1b", "--lora-rank", "8", "--quantize", "gptq-int4", "--stack", "hf-trainer",
            "--precision", "fp16-mixed"]
    assert main([*base, *argv]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


def test_a_gptq_base_needs_adapters(capsys):
    assert main(["memory", "llama-3.2-1b", "--quantize", "gptq-int8", "--precision", "fp16-mixed"]) == 2
    assert "--lora-rank" in capsys.readouterr().err


def test_job_spec_and_flags_give_the_same_answer(capsys):
    from gpuwise.estimate.job_space import space_from_jobspec
    from gpuwise.workload.jobspec import parse_job

    space = space_from_jobspec(parse_job({"name": "t", "model": "qwen-7b", "training": {
        "seq_len": 2048, "global_batch": 16, "tokens": 1e8, "precision": "fp16-mixed", "lora_rank": 8,
        "lora_targets": "q,k,v", "recompute": "full", "stack": "ms-swift", "quantize": "gptq-int4"}}))
    assert space.base.quantize == "gptq-int4"
    est = estimate_memory(QWEN, replace(space.base, micro_batch=1, grad_accum=1))
    assert main(["memory", "qwen-7b", "--stack", "ms-swift", "--lora-rank", "8", "--lora-targets", "q,k,v",
                 "--precision", "fp16-mixed", "--seq-len", "2048", "--recompute", "full", "--quantize", "gptq-int4",
                 "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)
    assert flags["allocated_gib"] == pytest.approx(est.allocated / 2 ** 30, abs=1e-3)


def test_ms_swift_gptq_rows_are_compared_out_of_sample():
    """The Dec-2023 run's GPTQ rows (fixed-length batches) are validation rows now, nothing fitted on them."""
    from gpuwise.validation.memory_external import SWIFT_DEC_CSV, ms_swift_rows

    rows = [r for r in ms_swift_rows(SWIFT_DEC_CSV) if "gptq" in r.source]
    assert len(rows) == 2 and all(r.status == "compared" for r in rows)
    assert all(abs(r.predicted / r.measured - 1) < 0.10 for r in rows)
