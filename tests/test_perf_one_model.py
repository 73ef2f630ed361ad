"""Behaviour of the single job performance model (gpuwise.estimate.performance) and of the
duplicates issue 11 lists: checkpoint size, LoRA trainable parameters, grad_accum's meaning and the
batch search."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpuwise.errors import InputError
from gpuwise.estimate.fits import predict
from gpuwise.estimate.fits.pollux import PolluxParams
from gpuwise.estimate.job_model import JobModel, PolluxStepTime
from gpuwise.estimate.lora import adapter_params
from gpuwise.estimate.performance import (batch_configs, best_of, checkpoint_size,
                                          job_performance, largest_micro_batch)
from gpuwise.estimate.stat_efficiency import NoiseModel
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model, param_count
from gpuwise.workload.training import ParallelPlan, TrainingConfig

ROOT = Path(__file__).resolve().parents[1]
LLAMA = load_model("llama-3.1-8b")
H100 = get_gpu("H100")
P = PolluxParams(0.05, 0.004, 0.3, 0.01, 0.08, 0.004, 1.0)   # gamma 1: compute and sync add up


def test_checkpoint_is_what_the_memory_model_keeps_per_parameter():
    """The checkpoint holds the stored weights and optimizer state as the memory model counts them
    (issue 20: it used the ZeRO paper's 14 B/param where FSDP2 keeps 12). PyTorch autocast / FSDP2,
    bf16-mixed AdamW: fp32 weights (the master copy) + fp32 moments = 4 + 8 = 12 B/param; DeepSpeed
    ZeRO-1/2: 2 + (4 master + 8 moments) = 14 B/param."""
    from gpuwise.estimate.model_states import state_semantics

    n = param_count(LLAMA)
    fsdp = TrainingConfig(plan=ParallelPlan(dp=8, zero=3))
    assert checkpoint_size(LLAMA, TrainingConfig()).bytes == 12 * n
    assert checkpoint_size(LLAMA, fsdp).bytes == 12 * n
    assert checkpoint_size(LLAMA, TrainingConfig(plan=ParallelPlan(dp=8, zero=2))).bytes == 14 * n
    assert checkpoint_size(LLAMA, TrainingConfig(precision="fp32", optimizer="adam")).bytes == 12 * n
    assert checkpoint_size(LLAMA, TrainingConfig(optimizer="sgd")).bytes == 8 * n
    for zero in (0, 1, 2, 3):   # one accounting: the same bytes the memory model keeps per parameter
        sem = state_semantics("bf16-mixed", "adamw", LLAMA.hidden, zero)
        cfg = TrainingConfig(plan=ParallelPlan(dp=8, zero=zero))
        assert checkpoint_size(LLAMA, cfg).bytes == (sem.weights + sem.optimizer) * n
    lora = checkpoint_size(LLAMA, TrainingConfig(lora_rank=16))
    assert lora.bytes == 12 * adapter_params(LLAMA, 16) and "LoRA" in lora.assumption


def test_estimate_and_plan_report_the_same_checkpoint(capsys):
    from gpuwise.cli.main import main
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    spec = ROOT / "examples" / "llama-3.1-8b-pretrain.yaml"
    assert main(["estimate", str(spec), "--gpu", "H100", "--gpus", "8", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    job = from_jobspec(load_job(str(spec)), gpus=["H100"])
    opt = job.goodput.shape("H100", 8, 1).best
    ckpt = checkpoint_size(LLAMA, opt.config)
    assert est["checkpoint_gb"] == pytest.approx(opt.checkpoint_gb) == pytest.approx(ckpt.gb)
    # `estimate JOB.yaml` is the planner's search on that shape: same plan, micro-batch and accumulation
    assert (est["plan"]["dp"], est["plan"]["tp"], est["plan"]["pp"], est["plan"]["zero"]) == \
        (opt.plan.dp, opt.plan.tp, opt.plan.pp, opt.plan.zero)
    assert (est["micro_batch"], est["grad_accum"]) == (opt.micro_batch, opt.grad_accum)
    assert est["step_time_s"] == pytest.approx(opt.step_time_s)


def test_lora_step_time_syncs_the_adapters_lora_counts():
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, lora_rank=16, plan=ParallelPlan(dp=8))
    note = next(a for a in job_performance(LLAMA, cfg, H100).step.assumptions if a.startswith("LoRA"))
    share = adapter_params(LLAMA, 16) / param_count(LLAMA)
    assert f"{share:.3%}" in note and share < 0.002        # ~0.085%, not the old hard-coded 0.5%


def test_grad_accum_is_total_micro_steps_everywhere():
    # fitted forms: grad_accum=1 is one micro-step; 3 adds two more whole micro-steps
    one, _ = predict(P, 1, 1, 32, grad_accum=1)
    three, _ = predict(P, 1, 1, 32, grad_accum=3)
    assert one == pytest.approx(0.05 + 0.004 * 32) and three == pytest.approx(3 * one)
    with pytest.raises(InputError):       # Pollux's "0 extra steps" must not silently mean -1 micro-step
        predict(P, 1, 1, 32, 0)
    # JobModel: global batch = replicas x local x grad_accum; fixed_batch picks the fewest micro-steps
    jm = JobModel(PolluxStepTime(P), NoiseModel(math.inf, 64, 64 * 1000), 64, 4096, 64)
    c = jm.fixed_batch(4, 512)
    assert (c.local_bsz, c.grad_accum, c.global_batch) == (64, 2, 512)
    assert c.step_time == pytest.approx(jm.step_time(4, None, 64, 2))
    assert jm.fixed_batch(4, 256).grad_accum == 1


def test_fit_csv_reads_pollux_accum_steps_as_extra_micro_steps(tmp_path, capsys):
    from gpuwise.cli.main import main

    rows = [(1, 1, 16, 1), (1, 1, 32, 1), (1, 2, 32, 1), (2, 4, 32, 1), (1, 4, 64, 2), (2, 8, 16, 3)]
    pollux = ["placement,local_bsz,step_time,sync_time,accum_steps"]
    ours = ["placement,local_bsz,step_time,sync_time,grad_accum"]
    for nodes, reps, b, a in rows:
        place = "".join([str(reps // nodes)] * nodes)
        st, sy = predict(P, nodes, reps, b, a)
        pollux.append(f"{place},{b},{st},{sy},{a - 1}")
        ours.append(f"{place},{b},{st},{sy},{a}")
    out = []
    for name, lines in (("pollux.csv", pollux), ("ours.csv", ours)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        assert main(["fit", str(tmp_path / name), "--form", "pollux", "--json"]) == 0
        out.append(json.loads(capsys.readouterr().out))
    assert out[0]["parameters"] == out[1]["parameters"]
    assert out[0]["in_sample_error"]["median"] < 0.02


def test_batch_configs_stay_in_range_and_cover_both_searches():
    dense = batch_configs(4, (100, 1000), (1, 2, 4, 8, 16, 32, 64), max_accum=4)
    gb = dense.global_batch
    assert len(dense) and np.all((gb >= 100) & (gb <= 1000)) and np.all(dense.micro <= 64)
    assert 100 in gb or not np.any(gb < 104)        # an accumulation count that reaches the lower end
    assert set(dense.grad_accum) == {1, 2, 3, 4}
    # planner: one accumulation per target global batch, floored at the pipeline's micro-batches
    tg = batch_configs(8, (512, 512), (2,), min_accum=4, targets=(512,), tolerance=0.25)
    assert list(tg.grad_accum) == [32] and list(tg.global_batch) == [512]
    assert len(batch_configs(8, (512, 512), (100,), targets=(512,))) == 0  # 800 is out of range


def test_job_model_best_batch_is_the_best_of_its_candidates():
    jm = JobModel(PolluxStepTime(P), NoiseModel(2000.0, 64, 64 * 20000), 64, 4096, 256)
    c = jm.best_batch(8)
    from gpuwise.estimate.job_space import micro_batch_grid

    assert micro_batch_grid(256) == (1, 2, 4, 8, 16, 32, 64, 128, 256) and micro_batch_grid(48)[-2:] == (32, 48)
    cands = batch_configs(8, (64, 4096), micro_batch_grid(256), max_accum=jm.max_accum)
    st = np.array([jm.step_time(8, None, m, a) for m, a in zip(cands.micro, cands.grad_accum)])
    _, t = best_of(cands.global_batch, st, jm.noise)
    assert jm.time_to_target(8) == pytest.approx(t.min())
    assert c.goodput == pytest.approx(max(jm.goodput(8, None, m, a) for m, a in zip(cands.micro, cands.grad_accum)))


def test_largest_micro_batch_exact_and_powers_of_two():
    cfg = TrainingConfig(seq_len=4096, plan=ParallelPlan(dp=8, zero=3))
    p2 = largest_micro_batch(LLAMA, cfg, H100)
    exact = largest_micro_batch(LLAMA, cfg, H100, powers_of_two=False)
    assert p2 >= 1 and p2 & (p2 - 1) == 0 and p2 <= exact < 2 * p2
    assert job_performance(LLAMA, replace(cfg, micro_batch=exact), H100).fits
    assert not job_performance(LLAMA, replace(cfg, micro_batch=exact + 1), H100).fits


def test_job_performance_parts_and_assumptions():
    noise = NoiseModel(math.inf, 16, 16 * 1000)
    cfg = TrainingConfig(micro_batch=1, seq_len=2048, grad_accum=2, plan=ParallelPlan(dp=8, zero=3))
    perf = job_performance(LLAMA, cfg, H100, noise=noise)
    assert perf.fits and perf.steps_to_target == pytest.approx(1000.0)
    assert perf.time_to_target_s == pytest.approx(1000.0 * perf.step.step_time_s)
    text = " | ".join(perf.assumptions)
    assert "checkpoint = stored weights + optimizer state" in text and "H100" in text
    assert job_performance(LLAMA, cfg, None).memory.total == perf.memory.total
