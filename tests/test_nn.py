"""gpuwise.nn: every transformer preset builds with exactly the structural parameter count, and a
small model really trains."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from gpuwise.nn import Adapters, FAMILIES, build_model, tp_shard_spec  # noqa: E402
from gpuwise.workload.models import list_presets, load_model, param_count  # noqa: E402

TRANSFORMERS = [n for n in list_presets() if load_model(n).is_transformer]


def _n(model, trainable=False):
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)


def test_every_family_has_a_preset():
    assert {load_model(n).family for n in TRANSFORMERS} == set(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("name", TRANSFORMERS)
def test_param_count_matches_the_structural_count(name):
    spec = load_model(name)
    assert _n(build_model(spec, device="meta")) == param_count(spec)


def tiny(name, **kw):
    s = load_model(name)
    kv = 1 if s.n_kv_heads == 1 else (2 if s.n_kv_heads < s.n_heads else 4)
    return replace(s, n_layers=2, hidden=64, n_heads=4, n_kv_heads=kv, head_dim=16, ffn_hidden=128, vocab_size=97,
                   max_seq_len=64, n_encoder_layers=2 if s.n_encoder_layers else 0, **kw)


@pytest.mark.parametrize("name,attention", [("gpt2", "sdpa"), ("llama-3.1-8b", "eager"), ("t5-base", "sdpa"),
                                            ("mixtral-8x7b", "sdpa")])
def test_small_model_trains(name, attention):
    torch.manual_seed(0)
    model = build_model(tiny(name), attention=attention)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = torch.arange(33).repeat(4, 1) % 97          # a learnable sequence: next token = token + 1
    losses = []
    for _ in range(40):
        loss = model(ids[:, :-1], ids[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses[::10]


def test_lora_trains_only_the_adapters():
    from gpuwise.estimate.lora import adapter_params

    spec = tiny("llama-3.1-8b")
    model = build_model(spec, adapters=Adapters(rank=4))
    assert _n(model, trainable=True) == adapter_params(spec, 4)
    qlora = build_model(spec, adapters=Adapters(rank=4, nf4=True))
    assert _n(qlora, trainable=True) == adapter_params(spec, 4)
    qlora(torch.randint(0, 97, (2, 8)), torch.randint(0, 97, (2, 8))).backward()


def test_tp_shard_divides_heads_mlp_and_vocabulary():
    spec = load_model("llama-3.1-8b")
    local = tp_shard_spec(spec, 8)
    assert (local.n_heads, local.n_kv_heads, local.ffn_hidden, local.vocab_size) == (4, 1, 1792, 16032)
    full, shard = _n(build_model(spec, device="meta", layers=1)), _n(build_model(local, device="meta", layers=1))
    assert shard < full / 7
