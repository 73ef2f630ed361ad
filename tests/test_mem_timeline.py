"""What the frameworks allocate and when: sharding over dp x cp, the loss-boundary peak of large
vocabularies, FSDP2 under pipeline parallelism, pipeline schedules, recompute policies by name and
the sequence-parallel default at the CLI edge."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.estimate import activations as act
from gpuwise.estimate.flops import step_flops
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.memory_timeline import in_flight
from gpuwise.workload.models import load_model, param_counts
from gpuwise.workload.training import ParallelPlan, TrainingConfig

LLAMA = load_model("llama-3.1-8b")


def test_context_parallel_rows_with_fixed_tokens_per_gpu_are_equal():
    """FSDP 8 x CP 1 ... 1 x 8 with 4096 tokens per GPU: states shard over dp x cp, activations per GPU
    are the same, so the allocated peak is the same."""
    peaks = {estimate_memory(LLAMA, TrainingConfig(micro_batch=1, seq_len=4096 * cp, recompute="op",
                                                   plan=ParallelPlan(dp=8 // cp, cp=cp, zero=3))).allocated
             for cp in (1, 2, 4, 8)}
    assert max(peaks) == pytest.approx(min(peaks), rel=1e-12)


def test_fsdp_shards_over_dp_times_cp():
    est = estimate_memory(LLAMA, TrainingConfig(micro_batch=1, seq_len=1024, plan=ParallelPlan(dp=4, cp=2, zero=3)))
    assert est.parameters == pytest.approx(4 * param_counts(LLAMA).total / 8)
    assert est.optimizer == pytest.approx(8 * param_counts(LLAMA).total / 8)


def test_loss_boundary_peak_of_a_large_vocabulary():
    """An 8B model with a 128k vocabulary on 8 FSDP GPUs: the float32 log-softmax plus its two
    float32 gradients (12 B per vocabulary entry and token) make the loss boundary the peak."""
    spec = LLAMA
    cfg = TrainingConfig(micro_batch=4, seq_len=4096, recompute="full", plan=ParallelPlan(dp=8, zero=3))
    est = estimate_memory(spec, cfg)
    tokens = 4 * 4096
    assert est.peak_phase == "loss boundary"
    assert est.temporaries >= 8 * spec.vocab_size * tokens and est.activations >= 4 * spec.vocab_size * tokens


def test_fsdp_under_pipeline_keeps_the_stage_unsharded():
    """PP x FSDP: reshard_after_forward=False and fp32 unsharded gradient accumulators (4 B per stage
    parameter) dominate llama-3.1-405b at TP8 x PP8 x FSDP8."""
    spec = load_model("llama-3.1-405b")
    cfg = TrainingConfig(micro_batch=1, seq_len=8192, grad_accum=16, recompute="full",
                         plan=ParallelPlan(dp=8, tp=8, pp=8, sp=True, zero=3))
    est = estimate_memory(spec, cfg)
    stage_params = param_counts(spec).total / 64
    assert est.gradients == pytest.approx(4 * stage_params, rel=0.1)
    assert est.allocated > 2 * estimate_memory(spec, cfg.__class__(**{**cfg.__dict__, "plan": ParallelPlan(
        dp=512, zero=3)})).parameters


def test_pipeline_schedules_in_flight():
    assert [in_flight("1f1b", 4, i, 8) for i in range(4)] == [4, 3, 2, 1]
    assert in_flight("zb", 4, 0, 8) == 4 and in_flight("gpipe", 4, 3, 8) == 8
    assert in_flight("1f1b", 4, 0, 2) == 2                           # fewer micro-batches than stages
    assert in_flight("interleaved-2", 4, 0, 8) == pytest.approx(4 + 3 / 2)   # Korthikanti: p + (p-1)/V


def test_recompute_policies_order_activations():
    def acts(r):
        st = act.ActivationSetting(micro_batch=1, seq_len=2048, recompute=r)
        return act.stack_bytes(LLAMA, st, 32)

    a = {r: acts(r) for r in ("none", "op", "layer-2", "layer-1", "full")}
    assert a["full"] == pytest.approx(a["layer-1"]) and a["full"] < a["layer-2"] < a["none"]
    assert a["op"] < a["none"]


def test_op_sac_keeps_every_second_matmul_output():
    st = act.ActivationSetting(micro_batch=1, seq_len=1, recompute="op")
    h, dq, dkv, f = 4096, 4096, 1024, 14336
    # block input, q (1st mm), v (3rd), w1 (5th), w2 (7th), attention output + fp32 lse per head
    assert act.op_sac_layer_bytes(LLAMA, st) == 2 * (h + dq + dkv + f + h + dq) + 4 * 32
    frac = (h * dkv + dq * h + h * f) / (h * dq + 2 * h * dkv + dq * h + 2 * h * f + f * h)
    assert act.op_sac_recomputed_fraction(LLAMA) == pytest.approx(frac)
    flops = step_flops(LLAMA, TrainingConfig(recompute="op"))
    assert 1.0 < flops.hardware_flops / flops.model_flops < step_flops(
        LLAMA, TrainingConfig(recompute="full")).hardware_flops / flops.model_flops


@pytest.mark.parametrize("argv,sp", [([], True), (["--no-sp"], False), (["--sp"], True)])
def test_sequence_parallel_default_at_the_cli(capsys, argv, sp):
    assert main(["memory", "llama-3.1-8b", "--gpus", "2", "--tp", "2", "--gpu", "H100", "--json", *argv]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["plan"]["sp"] is sp
