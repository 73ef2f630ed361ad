"""The LoRA adapters' step time: the bytes their ops move, counted on the layer code (estimate.adapter_traffic)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.estimate.adapter_traffic import VALUE_COLUMNS, adapter_key, adapter_traffic, key_of, table
from gpuwise.estimate.roofline_step import lora_adapter_s, op_efficiency_for
from gpuwise.estimate.step_time import analytical_step_time, roofline_hardware
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.models import load_model
from gpuwise.workload.stacks import stack_names
from gpuwise.workload.training import PRECISIONS, TrainingConfig

GPU = get_gpu("H100-80GB-SXM")
SPEC = load_model("llama-3.1-8b")
LORA = dict(micro_batch=2, seq_len=8192, lora_rank=8, lora_targets="all-linear", recompute="full")


def _adapter_s(cfg: TrainingConfig, stack_eff: str = "pytorch") -> float:
    hw = roofline_hardware(GPU, 0.0, 8, 50.0)
    return lora_adapter_s(SPEC, cfg, hw, op_efficiency_for(GPU, stack_eff))


def test_stored_rows_are_the_count_of_the_layer():
    """Recounting gpuwise.nn's LoRA layer (torch on CPU) gives the stored table exactly: it is a count, not a guess."""
    from gpuwise.validation import adapter_ops

    rows = adapter_ops.rows()
    stored = table()
    assert len(rows) == len(stored) >= 12
    for r in rows:
        key = key_of(r)
        assert stored[key].columns() == {c: r[c] for c in VALUE_COLUMNS}, key


def test_plain_adapter_bytes_follow_from_its_ops():
    """Pure 16-bit, no dropout: A's matmul reads the input (2 B per input dimension); B writes its output, the scaling
    reads and writes it, the sum reads two outputs and writes one (12 B per output dimension). Under PEFT's float32
    adapters the input is cast (read 2, write 4) and A reads the float32 copy, the sum runs in float32 and is cast
    back: 10 and 28."""
    plain = table()[(False, False, "pure16", False, False, "no")]
    peft = table()[(True, False, "pure16", False, False, "no")]
    assert (plain.fwd_in, plain.fwd_out) == (2, 12)
    assert (peft.fwd_in, peft.fwd_out) == (10, 28)


def test_peft_layers_cost_more_than_plain_adapters():
    """The same adapters, timed at the same rates: PEFT's float32 layers (hf-trainer, universal-llm-trainer) move
    more than twice the bytes of adapters in the compute dtype (pytorch), with dropout more again."""
    cfg = TrainingConfig(precision="bf16", stack="pytorch", lora_dropout=0.0, **LORA)
    plain = _adapter_s(cfg)
    peft = _adapter_s(replace(cfg, stack="hf-trainer"))
    dropped = _adapter_s(replace(cfg, stack="hf-trainer", lora_dropout=0.05))
    assert peft > 2 * plain and dropped > peft
    assert adapter_key(replace(cfg, stack="hf-trainer")) == (True, False, "pure16", False, False, "no")


def test_adapter_time_scales_with_targets_tokens_and_recompute():
    cfg = TrainingConfig(precision="bf16-mixed", stack="pytorch", **LORA)
    t = adapter_traffic(cfg)
    launches = _adapter_s(replace(cfg, micro_batch=0))       # no tokens: the kernels' launches alone
    assert launches > 0
    moved = _adapter_s(cfg) - launches
    assert _adapter_s(replace(cfg, micro_batch=4)) - launches == pytest.approx(2 * moved)
    # full recompute re-runs each adapter's forward once: (2F + B) / (F + B) of the bytes without it
    h, f, kv = SPEC.hidden, SPEC.ffn_hidden, SPEC.n_kv_heads * SPEC.head_dim
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)]
    fwd = sum(t.fwd_in * a + t.fwd_out * b + t.fwd_rank * 8 for a, b in shapes)
    bwd = sum(t.bwd_in * a + t.bwd_out * b + t.bwd_rank * 8 for a, b in shapes)
    none = replace(cfg, recompute="none")
    launches_none = _adapter_s(replace(none, micro_batch=0))
    assert moved / (_adapter_s(none) - launches_none) == pytest.approx((2 * fwd + bwd) / (fwd + bwd))
    qv = replace(cfg, lora_targets="q,v")
    assert _adapter_s(qv) < _adapter_s(cfg) / 5


def test_every_stack_precision_base_and_plan_has_a_counted_row():
    """Every valid configuration finds a counted row: its own, or (a float32 stream into 16-bit adapters, which the
    reference layer cannot run) the same layer's on a 16-bit stream, and the assumption line says which."""
    from gpuwise.estimate.adapter_traffic import counted_key, traffic_note
    from gpuwise.workload.training import ParallelPlan

    stand_ins = 0
    for stack in stack_names():
        for precision in PRECISIONS:
            for quantize in (None, "nf4"):
                for zero in (0, 1, 3):
                    for dropout in (0.0, 0.1):
                        cfg = TrainingConfig(precision=precision, stack=stack, quantize=quantize, lora_dropout=dropout,
                                             plan=ParallelPlan(dp=2, zero=zero), **LORA)
                        assert _adapter_s(cfg) > 0
                        if counted_key(cfg) != adapter_key(cfg):
                            stand_ins += 1
                            assert "stands in" in traffic_note(cfg)
                            assert adapter_key(cfg)[4] and not adapter_key(cfg)[0]
    assert stand_ins > 0
    assert _adapter_s(TrainingConfig(precision="bf16", quantize="nf4", lora_rank=0, micro_batch=1, seq_len=2048)) == 0


def test_parallel_layouts_split_the_adapters_as_the_ranks_hold_them():
    """Tensor parallel: column-parallel linears split their output, row-parallel their input (the rank is whole);
    pipeline stages hold 1/pp of the blocks; the output layer's adapter runs once, on the last stage, not re-run."""
    from gpuwise.workload.training import ParallelPlan

    cfg = TrainingConfig(precision="bf16-mixed", stack="pytorch", **LORA)
    t = adapter_traffic(cfg)
    h, f, kv = SPEC.hidden, SPEC.ffn_hidden, SPEC.n_kv_heads * SPEC.head_dim
    tp8 = [(h, h // 8), (h, kv // 8), (h, kv // 8), (h // 8, h), (h, f // 8), (h, f // 8), (f // 8, h)]
    per_token = sum(t.bytes_per_token(a, b, 8, 2.0) for a, b in tp8) * SPEC.n_layers
    hw = roofline_hardware(GPU, 0.0, 8, 50.0)
    eff = op_efficiency_for(GPU, "pytorch")
    tp = replace(cfg, plan=ParallelPlan(tp=8))
    launches = lora_adapter_s(SPEC, replace(tp, micro_batch=0), hw, eff)
    assert lora_adapter_s(SPEC, tp, hw, eff) - launches == pytest.approx(16384 * per_token / (hw.hbm_bytes_s * eff.memory))
    pp = replace(cfg, plan=ParallelPlan(pp=4))
    assert lora_adapter_s(SPEC, pp, hw, eff) == pytest.approx(_adapter_s(cfg) / 4)
    head = replace(cfg, lora_targets="all-linear,head")
    head_bytes = (t.bytes_per_token(h, SPEC.vocab_size, 8, 1.0) * 16384
                      + t.fixed_bytes(h, SPEC.vocab_size, 8, 1.0)) / (hw.hbm_bytes_s * eff.memory)
    head_launch = (t.fwd_kernels + t.bwd_kernels) * eff.launch_s
    assert _adapter_s(head) - _adapter_s(cfg) == pytest.approx(head_bytes + head_launch)
    assert lora_adapter_s(SPEC, replace(head, plan=ParallelPlan(pp=4)), hw, eff) == pytest.approx(
        _adapter_s(cfg) / 4 + head_bytes + head_launch)


def test_a_mixture_runs_the_adapters_of_its_routed_experts_only():
    moe = load_model("mixtral-8x7b")
    cfg = TrainingConfig(precision="bf16-mixed", stack="pytorch", micro_batch=1, seq_len=4096, lora_rank=8,
                         lora_targets="gate,up,down")
    hw = roofline_hardware(GPU, 0.0, 8, 50.0)
    eff = op_efficiency_for(GPU, "pytorch")
    t = adapter_traffic(cfg)
    h, f = moe.hidden, moe.ffn_hidden
    per_token = moe.experts_per_token * sum(t.bytes_per_token(a, b, 8, 1.0) for a, b in ((h, f), (h, f), (f, h)))
    launches = lora_adapter_s(moe, replace(cfg, micro_batch=0), hw, eff)
    assert lora_adapter_s(moe, cfg, hw, eff) - launches == pytest.approx(
        4096 * per_token * moe.n_layers / (hw.hbm_bytes_s * eff.memory))


def test_estimate_states_the_counted_adapter_time():
    cfg = TrainingConfig(precision="bf16", stack="universal-llm-trainer", grad_accum=32, **LORA)
    est = analytical_step_time(SPEC, cfg, GPU)
    line = next(a for a in est.assumptions if a.startswith("LoRA:"))
    assert "calibration/adapter_traffic.csv" in line and "PEFT's layers" in line and "with dropout" in line
    hw = roofline_hardware(GPU, 0.0, 8, 50.0)
    per_step = lora_adapter_s(SPEC, cfg, hw, op_efficiency_for(GPU, cfg.stack)) * 32
    assert f"{per_step * 1e3:.3g} ms per step" in line
    assert per_step / est.step_time_s > 0.15         # PEFT's casts and dropout: over 15% of the step


def test_the_reference_layer_moves_what_peft_s_own_layer_moves():
    """Where peft is installed (not a gpuwise dependency): PEFT's own lora.Linear, counted the same way, moves the
    stored bytes and kernels under autocast and in pure bf16."""
    pytest.importorskip("peft")
    from gpuwise.validation import adapter_ops

    for r in adapter_ops.peft_rows():
        key = key_of(r)
        assert table()[key].columns() == {c: r[c] for c in VALUE_COLUMNS}, key
