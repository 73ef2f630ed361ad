"""Published formulas and worked vectors the memory estimator must reproduce.

- Frenzy MARP (Chang et al. 2024, arXiv 2412.14479) worked vectors of papers.md section E.3
  (derived vectors, GB = 1e9 bytes, printed to 2 decimals -> tolerance 0.006 GB).
- ZeRO paper (Rajbhandari et al. 2020, arXiv 1910.02054) Figure 1: Ψ = 7.5B, Nd = 64, K = 12:
  120 GB, 31.4 GB, 16.6 GB, 1.88 GB per GPU (printed to 3 significant digits -> 0.5%).
- Korthikanti et al. 2022 (arXiv 2205.05198) per-layer activation formula sbh(10 + 24/t + 5as/(ht)),
  exact (the tensor-level accounting must reduce to it for GPT layers).
"""

from __future__ import annotations

import pytest

from gpuwise.estimate import activations as act
from gpuwise.estimate.marp import marp_bytes, marp_params
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.model_states import state_bytes, zero_model_state_bytes
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.models import param_counts
from gpuwise.workload.training import ParallelPlan, TrainingConfig

GPT2XL_LIKE = dict(V=50257, h=1600, l=48, a=25, s=1024)
GPT67_LIKE = dict(V=50257, h=4096, l=32, a=32, s=2048)


def _gpt(V, h, l, a, s) -> ModelSpec:
    return ModelSpec(name="gpt-like", family="gpt2", n_layers=l, hidden=h, n_heads=a, n_kv_heads=a, head_dim=h // a,
                     ffn_hidden=4 * h, vocab_size=V, max_seq_len=s, tied_embeddings=True, attn_bias=True,
                     mlp_bias=True, learned_pos_emb=False)


@pytest.mark.parametrize("model,b,expected", [
    (GPT2XL_LIKE, 1, {1: 40.08, 2: 20.44, 4: 10.61, 8: 5.70}),
    (GPT2XL_LIKE, 4, {1: 66.98, 2: 35.06, 4: 19.10, 8: 11.13}),
    (GPT67_LIKE, 1, {1: 163.60, 2: 83.14, 4: 42.91, 8: 22.80}),
])
def test_frenzy_marp_worked_vectors(model, b, expected):
    for t, total_gb in expected.items():
        static, acts = marp_bytes(**model, b=b, t=t)
        assert (static + acts) / 1e9 == pytest.approx(total_gb, abs=0.006)


def test_frenzy_static_and_activation_split():
    # papers.md E.3: 1.5B model at b=1, t=1: 31.12 + 8.97; t=8: 3.89 + 1.81 (GB)
    assert marp_params(50257, 1600, 48) / 1e9 == pytest.approx(1.556, abs=5e-4)
    static, acts = marp_bytes(**GPT2XL_LIKE, b=1, t=1)
    assert (static / 1e9, acts / 1e9) == (pytest.approx(31.12, abs=0.006), pytest.approx(8.97, abs=0.006))
    static, acts = marp_bytes(**GPT2XL_LIKE, b=1, t=8)
    assert (static / 1e9, acts / 1e9) == (pytest.approx(3.89, abs=0.006), pytest.approx(1.81, abs=0.006))
    assert marp_params(50257, 4096, 32) / 1e9 == pytest.approx(6.650, abs=5e-4)


def test_structural_count_matches_marp_W():
    # The estimator's structural count of the same GPT equals W plus the final LayerNorm (2h).
    for m in (GPT2XL_LIKE, GPT67_LIKE):
        spec = _gpt(**m)
        assert param_counts(spec).total == marp_params(m["V"], m["h"], m["l"]) + 2 * m["h"]


@pytest.mark.parametrize("t", [1, 2, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
def test_tensor_accounting_reduces_to_korthikanti(t, sp):
    m = GPT67_LIKE
    spec = _gpt(**m)
    for b in (1, 3):
        st = act.ActivationSetting(micro_batch=b, seq_len=m["s"], tp=t, sp=sp, flash=False)
        assert act.layer_bytes(spec, st) == pytest.approx(
            act.korthikanti_layer_bytes(m["s"], b, m["h"], m["a"], t, sp), rel=1e-12)
        sel = act.ActivationSetting(micro_batch=b, seq_len=m["s"], tp=t, sp=sp, flash=False, recompute="selective")
        assert act.layer_bytes(spec, sel) == pytest.approx(
            act.korthikanti_layer_bytes(m["s"], b, m["h"], m["a"], t, sp, selective=True), rel=1e-12)


def test_estimator_activations_match_marp_term():
    # Full estimator, GPT layers only (first of two pipeline stages holds 2 micro-batches x l/2 layers
    # = l layers, as E.3 says), no flash: equals l * Korthikanti exactly, plus the embedding-dropout mask.
    # Megatron-LM semantics (fp32 main_grad, 16-bit weights): no autocast, so 16-bit residual stream.
    m = GPT67_LIKE
    spec = _gpt(**m)
    cfg = TrainingConfig(micro_batch=1, seq_len=m["s"], grad_accum=2, precision="fp16-mixed", optimizer="adam",
                         flash_attention=False, plan=ParallelPlan(tp=2, pp=2))
    est = estimate_memory(spec, cfg, context=False, fp32_grads=True)
    _, marp_act = marp_bytes(**m, b=1, t=2)
    mask = 2 * m["s"] * m["h"]                              # 2 micro-batches x s b h x 1 byte
    assert est.peak_stage == 0
    assert est.activations == pytest.approx(marp_act + mask, rel=1e-9)


def test_zero_paper_figure1():
    psi, nd = 7.5e9, 64
    expected = {0: 120e9, 1: 31.4e9, 2: 16.6e9, 3: 1.88e9}
    for stage, total in expected.items():
        assert sum(zero_model_state_bytes(psi, nd, stage)) == pytest.approx(total, rel=0.005)


def test_zero_formulas_symbolic():
    psi, nd, k = 1.0, 8, 12
    w, g, o = zero_model_state_bytes(psi, nd, 0)
    assert w + g + o == 2 * psi + 2 * psi + k * psi
    assert sum(zero_model_state_bytes(psi, nd, 1)) == 4 * psi + k * psi / nd
    assert sum(zero_model_state_bytes(psi, nd, 2)) == 2 * psi + (2 + k) * psi / nd
    assert sum(zero_model_state_bytes(psi, nd, 3)) == (4 + k) * psi / nd


def test_mixed_adam_is_zero_accounting():
    sb = state_bytes("bf16-mixed", "adamw")
    assert (sb.weights, sb.gradients, sb.optimizer) == (2, 2, 12)          # K = 12
    assert state_bytes("fp16-mixed", "adam", fp32_grads=True).gradients == 4  # Megatron: 18 B/param
    fp32 = state_bytes("fp32", "adamw")
    assert fp32.weights + fp32.gradients + fp32.optimizer == 16
    assert sum(vars(state_bytes("bf16", "adamw")).values()) == 8
    assert state_bytes("bf16-mixed", "adamw-8bit").optimizer == pytest.approx(4 + 2 * (1 + 8 / 2048))
    assert state_bytes("bf16-mixed", "sgd").optimizer == 8


def _block_params(spec: ModelSpec) -> int:
    c = param_counts(spec)
    return c.total - c.embedding - c.final - c.lm_head


@pytest.mark.parametrize("stage", [1, 2])
def test_estimator_model_states_follow_zero(stage):
    """ZeRO-1/2 (DeepSpeed): the optimizer state and sharded gradients equal the ZeRO paper's formula
    with Ψ = parameter count (2/2/12 bytes); weights stay whole."""
    spec = _gpt(**GPT2XL_LIKE)
    psi = param_counts(spec).total
    cfg = TrainingConfig(micro_batch=1, seq_len=1024, plan=ParallelPlan(dp=16, zero=stage))
    est = estimate_memory(spec, cfg)
    w, g, o = zero_model_state_bytes(psi, 16, stage)
    assert est.parameters == pytest.approx(w, rel=1e-9) and est.optimizer == pytest.approx(o, rel=1e-9)
    # freed before forward, full at the step, the blocks' at a tied output layer's embedding backward
    assert est.gradients in (0.0, pytest.approx(g, rel=1e-9), pytest.approx(g * _block_params(spec) / psi, rel=1e-9))


@pytest.mark.parametrize("stage", [0, 3])
def test_estimator_model_states_follow_pytorch(stage):
    """ZeRO-0 (autocast over fp32 params) and ZeRO-3 (FSDP2, bf16 param_dtype): 4 B fp32 weights
    (the master copy), 8 B AdamW moments, sharded over dp under FSDP; the optimizer step holds all
    4 B gradients (fused AdamW: no temporaries)."""
    spec = _gpt(**GPT2XL_LIKE)
    psi = param_counts(spec).total
    cfg = TrainingConfig(micro_batch=1, seq_len=128, plan=ParallelPlan(dp=16, zero=stage))
    est = estimate_memory(spec, cfg)
    n = 16 if stage == 3 else 1
    assert est.parameters == pytest.approx(4 * psi / n, rel=1e-9)
    assert est.optimizer == pytest.approx(8 * psi / n, rel=1e-9)
    if est.peak_phase == "optimizer step":             # ZeRO-0: 16 B/param at the step is the peak
        assert est.gradients == pytest.approx(4 * psi / n, rel=1e-9) and est.temporaries == 0.0
    else:       # FSDP: the loss tensors or the root group's gradient reduction outweigh 4 B/8; tied output
        #         layer: the embedding's backward (every block's gradient written, the root's in temporaries)
        assert (stage == 3 or est.peak_phase == "embedding backward") and est.temporaries > 0
        assert est.gradients in (0.0, pytest.approx(4 * _block_params(spec) / n, rel=1e-9),
                                 pytest.approx(4 * psi / n, rel=1e-9))
