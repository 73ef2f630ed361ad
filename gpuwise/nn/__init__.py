"""PyTorch models of our own, built from a ModelSpec, for every transformer preset family, and
residual CNNs (`build_resnet`, `gpuwise.nn.resnet`).

    build_model(spec, *, dtype=None, attention="sdpa", layers=None, ...) -> nn.Module

The module is plain PyTorch and trains for real (e.g. a few-layer GPT under DDP); the trace
(gpuwise.trace) builds the same modules under FakeTensorMode to count a training step's memory.
`model(ids, labels)` returns the fp32 cross-entropy loss (logits without labels).

torch is an optional dependency (pip install 'gpuwise[trace]'); only gpuwise.nn and
gpuwise.trace import it.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import torch
from torch import nn

from gpuwise.estimate.op_inventory import ENCODER_FAMILIES     # built as MaskedLM; t5 as T5; others as CausalLM
from gpuwise.nn.layers import Adapters, Attention, Shard
from gpuwise.nn.linear import Linear, LoRALinear, NF4Linear
from gpuwise.nn.models import T5, CausalLM, MaskedLM
from gpuwise.nn.resnet import ResNetConfig, build_resnet
from gpuwise.nn.traits import FAMILIES, traits
from gpuwise.workload.model_spec import ModelSpec

__all__ = ["build_model", "Shard", "Adapters", "FAMILIES", "tp_shard_spec", "set_compute_dtype", "build_resnet",
           "ResNetConfig"]
ATTENTION = ("sdpa", "eager")


def tp_shard_spec(spec: ModelSpec, tp: int) -> ModelSpec:
    """The shapes one tensor-parallel rank holds: heads, KV heads, MLP width and vocabulary / tp
    (norms, row-parallel biases and position tables stay whole)."""
    if tp <= 1:
        return spec
    return replace(spec, n_heads=spec.n_heads // tp, n_kv_heads=max(1, spec.n_kv_heads // tp),
                   ffn_hidden=spec.ffn_hidden // tp, vocab_size=-(-spec.vocab_size // tp))


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype | None):
    if dtype is None:
        yield
        return
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def set_compute_dtype(model: nn.Module, dtype: torch.dtype | None) -> None:
    """Compute in `dtype` over weights kept in another dtype (autocast's casts, written out)."""
    for m in model.modules():
        if isinstance(m, (Linear, LoRALinear, NF4Linear, Attention, CausalLM, MaskedLM, T5)):
            m.compute_dtype = dtype


def builds_padding_mask(spec: ModelSpec) -> bool:
    """The reference model of `spec` builds the padding mask (TrainingConfig.padding_mask): CausalLM does; the
    encoder (MaskedLM) and encoder-decoder (T5) models do not."""
    return spec.family != "t5" and spec.family not in ENCODER_FAMILIES


def build_model(spec: ModelSpec, *, dtype: torch.dtype | None = None, attention: str = "sdpa",
                layers: int | None = None, shard: Shard | None = None, adapters: Adapters | None = None,
                embed: bool = True, head: bool = True, device: str | torch.device | None = None) -> nn.Module:
    """A trainable nn.Module for a transformer ModelSpec.

    dtype: parameter dtype (default: torch's default); attention: "sdpa" (flash kernels) | "eager";
    layers: build this many decoder layers (and encoder layers, t5) instead of the spec's;
    shard: one tensor/sequence/context-parallel rank's shapes; adapters: LoRA/QLoRA;
    embed/head: False to build a middle or last pipeline stage of a decoder-only model;
    device: e.g. "meta" to build without memory.
    """
    tr = traits(spec)
    if attention not in ATTENTION:
        from gpuwise.errors import InputError

        raise InputError("attention", attention, "use sdpa (flash) or eager")
    shard = shard or Shard()
    local = tp_shard_spec(spec, shard.tp)
    n = spec.n_layers if layers is None else layers
    dev = torch.device(device) if device is not None else contextlib.nullcontext()
    with _default_dtype(dtype), dev:
        if spec.family == "t5":
            enc = spec.n_encoder_layers if layers is None else layers
            model = T5(local, tr, shard, adapters, attention, n, enc)
        elif spec.family in ENCODER_FAMILIES:
            model = MaskedLM(local, tr, shard, adapters, attention, n)
        else:
            model = CausalLM(local, tr, shard, adapters, attention, n, embed=embed, head=head)
    for m in model.modules():
        if isinstance(m, nn.Embedding) and spec.family != "t5":   # GPT-2 / BERT init; T5 keeps N(0, 1)
            nn.init.normal_(m.weight, std=0.02)
    if adapters is not None and (adapters.rank > 0 or adapters.nf4 or adapters.gptq is not None):
        for name, p in model.named_parameters():
            p.requires_grad_("lora_" in name)
    return model
