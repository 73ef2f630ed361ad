"""A learned position table sized per run (llm-foundry's MPT pretraining presets, ModelSpec.positions_per_run):
every caller builds the same model for the same sequence; a checkpoint's fixed table still refuses longer ones."""

from __future__ import annotations

import json

from gpuwise.cli.main import main
from gpuwise.estimate.goodput import JobGoodput
from gpuwise.estimate.job_space import space_from_jobspec
from gpuwise.estimate.memory import estimate_memory
from gpuwise.workload.jobspec import parse_job
from gpuwise.workload.models import load_model, param_count
from gpuwise.workload.training import ParallelPlan, TrainingConfig

SEQ = 8192


def test_memory_sizes_the_table_to_the_run_and_says_so(capsys):
    base = load_model("mpt-125m")
    assert base.positions_per_run and base.max_seq_len == 2048
    assert main(["memory", "mpt-125m", "--seq-len", str(SEQ), "--stack", "llm-foundry", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["params"] == param_count(base) + (SEQ - 2048) * base.hidden
    assert any(a.startswith(f"learned position table sized to the run: {SEQ} rows") for a in out["assumptions"])


def test_a_checkpoints_fixed_table_still_refuses_longer_sequences(capsys):
    assert not load_model("gpt2").positions_per_run
    assert main(["memory", "gpt2", "--seq-len", "4096"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seq-len" in err[0] and "learned position table" in err[0]


def test_every_caller_builds_the_same_model():
    cfg = TrainingConfig(micro_batch=2, seq_len=SEQ, stack="llm-foundry", plan=ParallelPlan(dp=8, zero=3))
    est = estimate_memory("mpt-125m", cfg)
    job = JobGoodput.for_config("mpt-125m", cfg)
    spec = parse_job({"name": "t", "model": "mpt-125m",
                      "training": {"seq_len": SEQ, "micro_batch": 2, "global_batch": 16, "stack": "llm-foundry",
                                   "tokens": 1e9}})
    sized = param_count(load_model("mpt-125m")) + (SEQ - 2048) * 768
    assert est.params == param_count(job.space.model) == param_count(space_from_jobspec(spec).model) == sized
    plans = job.fitting_plans("H100-80GB-SXM", 8, micro_batch=2)
    same = [e for c, e in plans if c.plan == cfg.plan and c.recompute == cfg.recompute]
    assert same and same[0].required == est.required
