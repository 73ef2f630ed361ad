"""The LoRA dropout lever (--lora-dropout, training.lora_dropout): each adapted linear keeps its dropout mask and its
adapter's own input; the stack's recipes' probability when none is given (stacks.csv lora_dropout); both methods."""

from __future__ import annotations

import dataclasses
import json

from gpuwise.cli.main import main
from gpuwise.estimate.levers import lora_dropout
from gpuwise.estimate.memory import estimate_memory
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

BLOCK_PEAK = ModelSpec(name="block-peak", family="llama", n_layers=2, hidden=1024, n_heads=8, n_kv_heads=8,
                       head_dim=128, ffn_hidden=2816, vocab_size=512, max_seq_len=4096, gated_mlp=True,
                       norm="rmsnorm")


def _json(capsys, *argv: str) -> dict:
    assert main(["memory", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_flag_states_and_changes_the_estimate(capsys):
    base = ["llama-3.2-1b", "--lora-rank", "8", "--lora-targets", "all-linear", "--seq-len", "1024"]
    off, on = _json(capsys, *base), _json(capsys, *base, "--lora-dropout", "0.1")
    assert off["config"]["lora_dropout"] == 0.0 and on["config"]["lora_dropout"] == 0.1
    assert on["breakdown_gib"]["activations"] > off["breakdown_gib"]["activations"]
    assert any("LoRA dropout 0.1: each adapted linear keeps its dropout mask" in a for a in on["assumptions"])
    # a stack's recipes' default, said so: universal-llm-trainer's configs train with 0.05
    ult = _json(capsys, *base, "--stack", "universal-llm-trainer")
    assert ult["config"]["lora_dropout"] == 0.05


def test_bad_values_are_one_line_exit_2(capsys):
    for argv, needle in ((["--lora-rank", "8", "--lora-dropout", "1.5"], "probability in [0, 1)"),
                         (["--lora-dropout", "0.1"], "add --lora-rank")):
        assert main(["memory", "llama-3.2-1b", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "lora-dropout" in err[0] and needle in err[0]


def test_analytic_and_trace_agree_with_dropout():
    """The reference stack's layers (adapters in the stream's dtype) and ms-swift's default 0.05, without recompute
    (every layer keeps its masks and adapter inputs): within 3% of the trace."""
    from gpuwise.trace.memory import trace_memory

    cfg = TrainingConfig(micro_batch=2, seq_len=2048, precision="bf16-mixed", lora_rank=8, lora_targets="all-linear",
                         lora_dropout=0.1)
    for c in (cfg, dataclasses.replace(cfg, stack="ms-swift", lora_dropout=None)):
        assert lora_dropout(c) > 0
        est = estimate_memory(BLOCK_PEAK, c)
        assert abs(est.allocated / trace_memory(BLOCK_PEAK, c).peak_allocated_bytes - 1) < 0.03
    none = estimate_memory(BLOCK_PEAK, dataclasses.replace(cfg, lora_dropout=0.0))
    assert estimate_memory(BLOCK_PEAK, cfg).activations > none.activations


def test_job_spec_field_reaches_the_configuration():
    from gpuwise.estimate.job_space import space_from_jobspec
    from gpuwise.workload.jobspec import parse_job

    def space(**training):
        return space_from_jobspec(parse_job({"name": "t", "model": "llama-3.2-1b", "training": {
            "seq_len": 1024, "global_batch": 16, "tokens": 1e8, "lora_rank": 8, **training}}))

    assert space(lora_dropout=0.1).base.lora_dropout == 0.1
    assert space(stack="ms-swift").base.lora_dropout == 0.05         # the stack's recipes'
    assert space().base.lora_dropout == 0.0
