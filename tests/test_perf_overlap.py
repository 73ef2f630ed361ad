"""Overlap windows of the data-parallel collectives (roofline_step.overlap_windows): the DP/ZeRO gradient reduction
hides only behind the last micro-step's backward (recompute's re-forward included), FSDP's forward all-gather behind
the forward, its backward all-gather + reduce-scatter behind the backward."""

import pytest

from gpuwise.estimate import comm
from gpuwise.estimate import roofline_step as rs
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig

H100 = get_gpu("H100")
MODEL = load_model("llama-3.1-8b")


def _hw(nic_gbps: float) -> rs.Hardware:
    return rs.Hardware(H100.bf16_tflops * 1e12, H100.fp32_tflops * 1e12, H100.hbm_gbps * 1e9, H100.intra_node_gbps,
                       nic_gbps, 8)


def _step(cfg: TrainingConfig, nic_gbps: float):
    hw, eff = _hw(nic_gbps), rs.op_efficiency_for(H100)
    t_micro, t_tp, t_cp, t_p2p, _, _, fwd_share = rs._micro_costs(MODEL, cfg, hw, eff)
    return rs.transformer_step(MODEL, cfg, hw, eff, None), t_micro + t_tp + t_cp + t_p2p, fwd_share


def test_dp_all_reduce_longer_than_the_backward_is_exposed_by_the_difference_not_hidden_by_the_forward():
    # 64 ranks over a 5 GB/s NIC: the 16 GB bf16 gradient all-reduce takes far longer than one micro-step
    cfg = TrainingConfig(micro_batch=1, seq_len=4096, grad_accum=4, plan=ParallelPlan(dp=64, zero=1))
    r, t_one, fwd_share = _step(cfg, 5.0)
    assert 0.30 < fwd_share < 0.36                     # forward ~1/3 of the operator time without recompute
    grad = rs._stage_params(MODEL, 1) * 2.0
    allreduce = 2 * comm.ring_gather_s(grad, 64, rs.group_gbps(64, 1, _hw(5.0)), comm.NET_LATENCY_S)
    assert allreduce > t_one
    t_bwd = t_one * (1 - fwd_share)
    assert r.dp_s == pytest.approx(allreduce - rs.DP_OVERLAP * t_bwd, rel=1e-9)
    # the forward does not hide it: more exposed than the whole-micro-step window would leave
    assert r.dp_s - (allreduce - rs.DP_OVERLAP * t_one) == pytest.approx(rs.DP_OVERLAP * t_one * fwd_share, rel=1e-9)


def test_recompute_runs_inside_backward_and_widens_its_window():
    none = TrainingConfig(micro_batch=1, seq_len=4096, plan=ParallelPlan(dp=8, zero=1))
    full = TrainingConfig(micro_batch=1, seq_len=4096, recompute="full", plan=ParallelPlan(dp=8, zero=1))
    (_, t_none, f_none), (_, t_full, f_full) = _step(none, 50.0), _step(full, 50.0)
    assert f_full < f_none
    assert t_full * f_full == pytest.approx(t_none * f_none, rel=0.02)       # same forward seconds
    assert t_full * (1 - f_full) > t_none * (1 - f_none) * 1.2              # backward + re-forward


def test_fsdp_forward_gather_hides_only_behind_the_forward():
    o = rs.FSDP_OVERLAP
    # a long backward cannot hide the forward all-gather: exposed by its excess over the forward window
    assert rs.fsdp_exposed_s(1.0, 1.0, 0.5, 10.0) == pytest.approx(1.0 - o * 0.5)
    # and the backward gather + reduce-scatter only behind the backward
    assert rs.fsdp_exposed_s(1.0, 1.0, 10.0, 1.0) == pytest.approx(2.0 - o * 1.0)
    assert rs.fsdp_exposed_s(1.0, 1.0, 2.0, 3.0) == 0.0
    cfg = TrainingConfig(micro_batch=1, seq_len=4096, grad_accum=2, plan=ParallelPlan(dp=64, zero=3))
    r, t_one, fwd = _step(cfg, 5.0)
    bw, weights = rs.group_gbps(64, 1, _hw(5.0)), rs._stage_params(MODEL, 1) * 2.0
    gather = comm.ring_gather_s(weights, 64, bw, comm.NET_LATENCY_S)
    assert r.dp_s == pytest.approx(2 * rs.fsdp_exposed_s(gather, gather, t_one * fwd, t_one * (1 - fwd)), rel=1e-9)
