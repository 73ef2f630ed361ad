"""Gemma 2 in the memory model: the config.json reader, the presets' structure, soft-capping's saved tensors in
the analytic estimate and in the trace of gpuwise.nn's model, and the real maths of that model (soft-capped
SDPA equals eager, local layers do not see past their window)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.estimate.memory import estimate_memory
from gpuwise.workload.hf_config import spec_from_config
from gpuwise.workload.models import load_model, param_count, param_counts
from gpuwise.workload.training import TrainingConfig

GEMMA2_9B_CONFIG = {   # google/gemma-2-9b config.json keys (values as in litgpt config.py @ 00af8b0d)
    "model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
    "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
    "max_position_embeddings": 8192, "query_pre_attn_scalar": 256, "sliding_window": 4096,
    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"}


def test_reader_maps_a_gemma2_config():
    s = spec_from_config(GEMMA2_9B_CONFIG, "gemma-2-9b")
    assert (s.family, s.head_dim, s.n_kv_heads, s.norms_per_block) == ("gemma2", 256, 8, 4)
    assert (s.attn_softcap, s.final_softcap, s.sliding_window, s.query_scale_dim) == (50.0, 30.0, 4096, 256)
    assert s.tied_embeddings and s.gated_mlp and s.norm == "rmsnorm"
    assert [s.is_sliding(i) for i in range(4)] == [True, False, True, False]      # even layers are local
    # Gemma 2 report (arXiv 2408.00118) Table 2: 8,324,201,984 non-embedding parameters
    assert param_count(s) - param_counts(s).embedding == 8_324_201_984
    assert s == replace(load_model("gemma-2-9b"), source="")
    # Gemma2Config defaults where the file is silent; a null cap means no soft-capping
    bare = {k: v for k, v in GEMMA2_9B_CONFIG.items() if k not in ("head_dim", "attn_logit_softcapping")}
    d = spec_from_config({**bare, "final_logit_softcapping": None}, "g")
    assert (d.head_dim, d.attn_softcap, d.final_softcap) == (256, 50.0, 0.0)


@pytest.mark.parametrize("name, non_embedding", [("gemma-2-2b", 2_024_517_888), ("gemma-2-27b", 26_047_480_320)])
def test_presets_match_the_reports_non_embedding_counts(name, non_embedding):
    s = load_model(name)
    assert param_count(s) - param_counts(s).embedding == non_embedding


torch = pytest.importorskip("torch")


def tiny(layers=2, **kw):
    return replace(load_model("gemma-2-9b"), name="tiny-gemma2", n_layers=layers, hidden=128, n_heads=4,
                   n_kv_heads=2, head_dim=32, ffn_hidden=256, vocab_size=512, max_seq_len=1024,
                   query_scale_dim=32, **kw)


def _peaks(spec, cfg):
    from gpuwise.trace import trace_memory

    return (trace_memory(spec, cfg, extrapolate=False).peak_allocated_bytes,
            estimate_memory(spec, cfg, context=False).allocated)


@pytest.mark.parametrize("flash", [True, False])
def test_tiny_gemma2_estimate_agrees_with_its_trace(flash):
    cfg = TrainingConfig(micro_batch=2, seq_len=256, precision="bf16-mixed", flash_attention=flash)
    (t2, e2), (t4, e4) = _peaks(tiny(2), cfg), _peaks(tiny(4), cfg)
    assert e2 == pytest.approx(t2, rel=0.02) and e4 == pytest.approx(t4, rel=0.02)
    assert e4 - e2 == pytest.approx(t4 - t2, rel=0.02)            # growth per layer


@pytest.mark.parametrize("flash", [True, False])
def test_attention_softcap_keeps_s2_tanh_output_only_under_eager(flash):
    """tanh(x / cap) * cap on the s x s scores: eager attention keeps tanh's output (b x heads x s x s, 2 B in bf16)
    per layer until backward; under flash attention (softcap in the kernel) nothing more is kept."""
    b, s, layers = 2, 256, 3
    cfg = TrainingConfig(micro_batch=b, seq_len=s, precision="bf16", flash_attention=flash)
    capped, plain = _peaks(tiny(layers), cfg), _peaks(tiny(layers, attn_softcap=0.0), cfg)
    expected = 0 if flash else layers * b * 4 * s * s * 2
    assert capped[0] - plain[0] == pytest.approx(expected, abs=1 << 16)         # traced
    assert capped[1] - plain[1] == pytest.approx(expected, abs=1 << 16)         # analytic


def test_final_softcap_keeps_a_logits_sized_tanh_output():
    b, s, v = 2, 256, 512
    cfg = TrainingConfig(micro_batch=b, seq_len=s, precision="bf16")
    capped, plain = _peaks(tiny(), cfg), _peaks(tiny(final_softcap=0.0), cfg)
    assert capped[0] - plain[0] == pytest.approx(b * s * v * 2, rel=0.01)
    assert capped[1] - plain[1] == pytest.approx(b * s * v * 2, rel=0.01)


def test_gemma2_module_has_four_norms_and_soft_capped_sdpa_equals_eager():
    from gpuwise.nn import build_model

    spec = tiny(2, sliding_window=8)
    torch.manual_seed(0)
    eager = build_model(spec, attention="eager")
    assert sum(p.numel() for p in eager.parameters()) == param_count(spec)
    sdpa = build_model(spec, attention="sdpa")
    sdpa.load_state_dict(eager.state_dict())
    ids = torch.randint(0, spec.vocab_size, (2, 32))
    assert sdpa(ids, ids).item() == pytest.approx(eager(ids, ids).item(), rel=1e-5)


def test_a_local_layer_does_not_see_past_its_window():
    """One layer (layer 0: local, window 8): the last position's logits do not change when a token more than
    8 positions back changes, and do when one inside the window changes."""
    from gpuwise.nn import build_model

    torch.manual_seed(0)
    model = build_model(tiny(1, sliding_window=8), attention="eager").eval()
    ids = torch.randint(0, 512, (1, 32))
    far, near = ids.clone(), ids.clone()
    far[0, 5] = (far[0, 5] + 1) % 512
    near[0, 28] = (near[0, 28] + 1) % 512
    with torch.no_grad():
        base, f, n = (model(x)[0, -1] for x in (ids, far, near))
    assert torch.equal(base, f) and not torch.equal(base, n)


def test_the_gemma2_external_rows_are_scored():
    from gpuwise.validation.memory_external import universal_trainer_rows
    from gpuwise.validation.memory_stacks import litgpt_rows

    rows = [r for r in universal_trainer_rows() + litgpt_rows() if "Gemma 2" in r.source or "gemma-2-9b" in r.source]
    assert len(rows) == 12
    assert all(r.status in ("compared", "checked") for r in rows)
    assert all(r.passed for r in rows if r.status == "checked")
