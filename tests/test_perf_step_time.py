"""Analytical step-time model: FLOPs, efficiency, communication and validation against measurements."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.estimate import comm
from gpuwise.estimate.flops import step_flops
from gpuwise.estimate.step_time import analytical_step_time
from gpuwise.hardware.gpus import get_gpu
from gpuwise.validation.throughput import gavel_comparisons, korthikanti_comparisons, summarize
from gpuwise.workload.models import load_model, param_count
from gpuwise.workload.training import ParallelPlan, TrainingConfig


def test_flops_6n_plus_attention():
    """Kaplan et al. 2020 / PaLM: training FLOPs per token ~ 6N (+ 12*L*H*Q*T attention)."""
    m = load_model("llama-3.1-8b")
    f = step_flops(m, TrainingConfig(micro_batch=1, seq_len=2048))
    n_nonemb = param_count(m) - 128256 * 4096  # input embedding is a lookup, not a matmul
    attn = 12 * 32 * 2048 * 32 * 128
    assert f.model_flops / f.tokens == pytest.approx(6 * n_nonemb + attn, rel=0.01)
    full = step_flops(m, TrainingConfig(micro_batch=1, seq_len=2048, recompute="full"))
    assert full.hardware_flops == pytest.approx(f.model_flops * 4 / 3)
    lora = step_flops(m, TrainingConfig(micro_batch=1, seq_len=2048, lora_rank=16))
    assert lora.model_flops == pytest.approx(f.model_flops * 2 / 3)


def test_moe_uses_active_parameters():
    m = load_model("mixtral-8x7b")
    f = step_flops(m, TrainingConfig(micro_batch=1, seq_len=4096))
    # Mixtral: ~12.9B active of 46.7B; 6 * active << 6 * total
    assert f.model_flops / f.tokens < 6 * 0.4 * param_count(m)


def test_ring_and_bubble_formulas():
    # 2(n-1)/n bytes per rank for a ring all-reduce
    t = comm.ring_allreduce_s(1e9, 8, 100.0, latency=0.0)
    assert t == pytest.approx(2 * 7 / 8 * 1e9 / (100e9 * comm.LINK_EFFICIENCY))
    assert comm.pipeline_bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert comm.pipeline_bubble_fraction(1, 12) == 0.0
    assert comm.dp_sync_s(1e9, 1, 8, 100, 50) == 0.0


def test_korthikanti_iteration_times_and_mfu():
    """Korthikanti et al. 2022 Table 5 (A100-80GB, bf16): iteration times 1.10-94.42 s. These 8 points are
    among the 15 fit rows of the per-op efficiencies (in-sample): median error measured 5.1%, max 10.8% (on time);
    tolerance 6% / 12%."""
    comps = korthikanti_comparisons()
    assert len(comps) == 8
    s = summarize(comps)["korthikanti-tab5"]
    assert s["median_error"] < 0.06 and s["max_error"] < 0.12


def test_megatron_mfu_matches_published():
    """Korthikanti et al. 2022 Table 5 MFU with sequence parallel + selective recompute: 22B 41.5%,
    175B 51.4%, 530B 56.0%, 1T 56.3%; the per-op model (megatron stack) gives 45.5% and 53.6% (tolerance 5
    points; 45.0% and 52.5% before the flash-attention efficiency was fixed from kernel benchmarks)."""
    gpu = get_gpu("A100-80GB")
    from gpuwise.workload.model_spec import ModelSpec

    cases = [(6144, 64, 48, 8, 1, 4, 4, 1, 0.415), (12288, 96, 96, 8, 8, 64, 1, 3, 0.514)]
    for h, heads, layers, tp, pp, gb, mb, v, mfu in cases:
        m = ModelSpec(name="gpt", family="gpt", n_layers=layers, hidden=h, n_heads=heads, n_kv_heads=heads,
                      head_dim=h // heads, ffn_hidden=4 * h, vocab_size=51200, max_seq_len=2048,
                      learned_pos_emb=True, attn_bias=True, mlp_bias=True)
        cfg = TrainingConfig(micro_batch=mb, seq_len=2048, grad_accum=gb // mb, recompute="selective",
                             plan=ParallelPlan(tp=tp, pp=pp, sp=True), stack="megatron")
        est = analytical_step_time(m, cfg, gpu, 8, pipeline_interleave=v)
        assert est.mfu == pytest.approx(mfu, abs=0.05)


def test_gavel_validation_medians():
    """Gavel (OSDI'20) measured steps/s on K80/P100/V100: ResNet-50 single-GPU absolute (in-sample
    calibration, measured median 2.7%), cross-GPU ratios for ResNet-18/50 (measured 8.4%),
    1->8 GPU scaling (measured 17.7%: Gavel's 8-GPU runs lose up to 70% at small batch, which
    bandwidth alone does not explain). Tolerances: measured + 3 points."""
    s = summarize(korthikanti_comparisons() + gavel_comparisons())
    assert s["gavel-absolute"]["median_error"] < 0.06
    assert s["gavel-cross-gpu"]["median_error"] < 0.12
    assert s["gavel-scaling"]["median_error"] < 0.21
    assert s["all"]["median_error"] <= 0.15  # issue 3 target: analytical median <= 15%


CONFIGS = st.sampled_from([("llama-3.1-8b", "H100", 4096), ("resnet50", "A100-80GB", 0), ("gpt2", "V100", 1024),
                           ("llama-2-13b", "A100-80GB", 2048)])


@settings(max_examples=40, deadline=None)
@given(CONFIGS, st.integers(0, 2), st.integers(1, 8), st.sampled_from([0, 1, 3]))
def test_more_gpus_never_fewer_cluster_flops(cfgs, log2_gpus, micro, zero):
    """Property: at fixed per-GPU work (weak scaling, DP) inside one 8-GPU node, doubling GPUs never lowers
    cluster FLOP/s. Across nodes it may: a communication-bound job (gpt2, one 1024-token sequence per
    V100) syncs 250 MB of gradients over the slower inter-node link each step, and the roofline says so."""
    name, gpu_name, seq = cfgs
    model, gpu = load_model(name), get_gpu(gpu_name)
    n = 2 ** log2_gpus

    def cluster_flops(g):
        cfg = TrainingConfig(micro_batch=micro, seq_len=seq or 2048, plan=ParallelPlan(dp=g, zero=zero))
        est = analytical_step_time(model, cfg, gpu, 8)
        return step_flops(model, cfg).model_flops / est.step_time_s

    assert cluster_flops(2 * n) >= cluster_flops(n) * (1 - 1e-9)


@settings(max_examples=40, deadline=None)
@given(CONFIGS, st.integers(1, 16), st.integers(1, 4))
def test_larger_batch_never_fewer_samples_per_step_or_throughput(cfgs, micro, accum):
    name, gpu_name, seq = cfgs
    model, gpu = load_model(name), get_gpu(gpu_name)
    a = TrainingConfig(micro_batch=micro, seq_len=seq or 2048, grad_accum=accum, plan=ParallelPlan(dp=4))
    b = TrainingConfig(micro_batch=micro + 1, seq_len=seq or 2048, grad_accum=accum, plan=ParallelPlan(dp=4))
    ea, eb = analytical_step_time(model, a, gpu, 8), analytical_step_time(model, b, gpu, 8)
    assert b.global_batch() > a.global_batch()
    assert eb.samples_per_s >= ea.samples_per_s * (1 - 1e-9)
    assert 0 < ea.mfu < 1 and math.isfinite(ea.step_time_s)


def test_cnn_roofline_against_published_resnet50():
    """NVIDIA DeepLearningExamples ResNet-50 v1.5 (PyTorch README, pytorch-21.03): 1x A100 80GB AMP
    2470 img/s (the calibration point: within 1%), 1x V100 16GB AMP 1200 img/s and FP32 367 img/s (out of
    sample: within 12%). Before the roofline the A100 prediction was ~8,100 img/s at MFU 0.64."""
    from gpuwise.validation.throughput import calibrate_roofline, nvidia_rn50_comparisons

    comps = {c.case.split(" (")[0]: c for c in nvidia_rn50_comparisons()}
    assert comps["resnet50 A100-80GB x1 fp16-mixed"].error < 0.01
    assert comps["resnet50 V100-16GB x1 fp16-mixed"].error < 0.12
    assert comps["resnet50 V100-16GB x1 fp32"].error < 0.12
    assert calibrate_roofline(2470, 256) == pytest.approx(15.9, rel=0.01)   # the CSV value re-derives


def test_roofline_leaves_transformers_and_states_itself():
    """Transformers use the per-operator roofline (and say so); a CNN estimate names the activation-traffic
    roofline and whether it is memory-bound in its assumptions."""
    from gpuwise.estimate.step_time import analytical_step_time
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    cfg = TrainingConfig(micro_batch=256, precision="bf16-mixed", plan=ParallelPlan())
    est = analytical_step_time(load_model("resnet50"), cfg, get_gpu("A100-80GB"), 8)
    assert 0.1 < est.mfu < 0.3 and any("roofline" in a and "memory-bound" in a for a in est.assumptions)
    lm = analytical_step_time(load_model("gpt2"), TrainingConfig(micro_batch=8, seq_len=1024,
                              precision="bf16-mixed", plan=ParallelPlan()), get_gpu("A100-80GB"), 8)
    assert any("per-op roofline Ampere" in a for a in lm.assumptions)
    assert not any("memory-bound" in a for a in lm.assumptions)
