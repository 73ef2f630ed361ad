"""Transformer building blocks: norms, attention (SDPA or eager, GQA/MQA, rotary/ALiBi/relative
positions), dense and gated MLPs, a top-k mixture of experts, and the residual block layouts
(pre-norm, post-norm, parallel residual with one or two norms)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gpuwise.nn import functions as fn
from gpuwise.estimate.gptq import GPTQFormat
from gpuwise.nn.linear import GPTQLinear, Linear, LoRALinear, NF4Linear
from gpuwise.nn.traits import Traits
from gpuwise.workload.model_spec import ModelSpec

_ACT = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


@dataclass(frozen=True)
class Shard:
    """One rank's view of tensor/sequence/context parallelism (shapes are already divided by tp
    in the spec the layers are built from; these say how the sequence is split)."""

    tp: int = 1
    sp: bool = False        # sequence parallel: residual stream and norms hold seq/tp tokens
    cp: int = 1             # context parallel: K/V gathered over cp ranks

    @property
    def sp_ways(self) -> int:
        return self.tp if self.sp and self.tp > 1 else 1


@dataclass(frozen=True)
class Adapters:
    """LoRA on the target modules (gpuwise.estimate.lora.lora_modules names; default query and value, or
    the fused QKV matrix)."""

    rank: int = 0
    nf4: bool = False                       # 4-bit frozen base for every linear layer (QLoRA)
    base_dtype: torch.dtype | None = None   # dtype of the frozen base (everything but the adapters)
    adapter_dtype: torch.dtype | None = None   # dtype of the trainable adapters (PEFT: fp32)
    targets: frozenset = frozenset({"q", "v"})   # q, k, v, o, gate, up, down, head
    peft: bool = False                      # PEFT's LoRA layer: each adapter casts its input to its own dtype
    dropout: float = 0.0                    # LoRA dropout on each adapter's input (each keeps its own output, mask)
    gptq: GPTQFormat | None = None          # GPTQ frozen base for every block linear layer (AutoGPTQ's storage)
    dora: bool = False                      # DoRA on each adapted linear (LoRALinear.dora)
    dora_rerun: bool = False                # PEFT's DoRA: under dropout the frozen matmul re-run on the dropped input

    def on(self, *modules: str) -> bool:
        """True if one of `modules` carries an adapter."""
        return bool(self.targets.intersection(modules))


def _on(adapters: Adapters | None, *modules: str) -> bool:
    return adapters is not None and adapters.on(*modules)


class Norm(nn.Module):
    def __init__(self, dim: int, rms: bool, bias: bool, eps: float = 1e-5):
        super().__init__()
        self.rms, self.eps = rms, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias and not rms else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rms:
            return fn.rms_norm(x, self.weight, self.eps)
        b = None if self.bias is None else self.bias.to(x.dtype)
        return F.layer_norm(x, (x.shape[-1],), self.weight.to(x.dtype), b, self.eps)


def make_norm(spec: ModelSpec) -> Norm:
    rms = spec.norm == "rmsnorm"
    bias = not (spec.family == "mpt" and not spec.mlp_bias)
    return Norm(spec.hidden, rms, bias)


def make_linear(d_in: int, d_out: int, bias: bool, adapters: Adapters | None, lora: bool) -> nn.Module:
    """A plain Linear, or (LoRA runs) a frozen base with adapters where `lora`, else frozen alone."""
    if adapters is None or (adapters.rank <= 0 and not adapters.nf4 and adapters.gptq is None):
        return Linear(d_in, d_out, bias=bias)
    if lora and adapters.rank > 0:
        return LoRALinear(d_in, d_out, adapters.rank, bias=bias, nf4=adapters.nf4, base_dtype=adapters.base_dtype,
                          adapter_dtype=adapters.adapter_dtype, peft=adapters.peft, dropout=adapters.dropout,
                          gptq=adapters.gptq, dora=adapters.dora, dora_rerun=adapters.dora_rerun)
    if adapters.gptq is not None:
        return GPTQLinear(d_in, d_out, adapters.gptq, bias=bias)
    if adapters.nf4:
        return NF4Linear(d_in, d_out, bias=bias, bias_dtype=adapters.base_dtype)
    lin = Linear(d_in, d_out, bias=bias, dtype=adapters.base_dtype)
    lin.requires_grad_(False)
    return lin


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, tr: Traits, shard: Shard, adapters: Adapters | None,
                 attention: str, causal: bool, cross: bool = False, window: int = 0):
        super().__init__()
        h, hd = spec.hidden, spec.head_dim
        self.heads, self.kv_heads, self.hd = spec.n_heads, spec.n_kv_heads, hd
        dq, dkv = self.heads * hd, self.kv_heads * hd
        self.fused = tr.fused_qkv and not cross
        b = spec.attn_bias
        if self.fused:
            self.qkv = make_linear(h, dq + 2 * dkv, b, adapters, _on(adapters, "q", "k", "v"))
        else:
            self.q = make_linear(h, dq, b, adapters, _on(adapters, "q"))
            self.k = make_linear(h, dkv, b, adapters, _on(adapters, "k"))
            self.v = make_linear(h, dkv, b, adapters, _on(adapters, "v"))
        self.o = make_linear(dq, h, b and spec.family != "qwen2", adapters, _on(adapters, "o"))
        self.shard, self.attention, self.causal = shard, attention, causal
        self.dropout = tr.dropout
        self.rotary_dims = int(hd * tr.rotary_fraction) // 2 * 2 if tr.positions == "rotary" else 0
        self.scale = 1.0 if spec.family == "t5" else None       # T5 folds the scale into its init
        if spec.query_scale_dim:                                 # gemma2 query_pre_attn_scalar ** -0.5
            self.scale = spec.query_scale_dim ** -0.5
        self.softcap, self.window = spec.attn_softcap, window     # gemma2: tanh soft-capping, local layers
        self.compute_dtype: torch.dtype | None = None            # autocast runs the attention core in it

    def _project(self, x, kv_x):
        b, s = x.shape[:2]
        if self.fused:
            qkv = self.qkv(x)
            q, k, v = qkv.split([self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd], -1)
        else:
            q, k, v = self.q(x), self.k(kv_x), self.v(kv_x)
        sk = kv_x.shape[1]
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.reshape(b, sk, self.kv_heads, self.hd).transpose(1, 2)
        v = v.reshape(b, sk, self.kv_heads, self.hd).transpose(1, 2)
        return q, k, v

    def _rotate(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = self.rotary_dims
        rot, rest = t[..., :r], t[..., r:]
        x1, x2 = rot.chunk(2, -1)
        rotated = rot * cos + torch.cat((-x2, x1), -1) * sin
        return torch.cat((rotated, rest), -1) if rest.shape[-1] else rotated

    def forward(self, x, rope=None, bias=None, kv_x=None):
        q, k, v = self._project(x, x if kv_x is None else kv_x)
        if self.rotary_dims and rope is not None:
            cos, sin = (t.to(q.dtype) for t in rope)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        k, v = fn.gather(k, self.shard.cp, 2), fn.gather(v, self.shard.cp, 2)    # CP: K/V of every rank
        cd = self.compute_dtype
        if cd is not None and q.dtype != cd:       # autocast casts the attention's inputs (a float32 stream's q, k,
            q, k, v = q.to(cd), k.to(cd), v.to(cd)  # v: 4-bit linears write their input's dtype)
        causal = self.causal and q.shape[2] == k.shape[2]
        mask = None if bias is None else bias.to(q.dtype)
        out = self.core(q, k, v, causal, mask)
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.o(out)

    def core(self, q, k, v, causal, mask):
        """The attention core (what Megatron's selective recompute recomputes). "sdpa" with soft-capping or a
        sliding window stands for flash-attn >= 2.6, which applies both inside the kernel (softcap,
        window_size) and keeps what flash attention keeps: under fake tensors the flash kernel is traced;
        real tensors compute the same maths eagerly (torch's SDPA has no softcap)."""
        if self.attention == "sdpa" and (fn.is_fake(q) or not (self.softcap or self._windowed(q))):
            return fn.attention(q, k, v, causal=causal, scale=self.scale, mask=mask,
                                dropout_p=self.dropout if self.training else 0.0)
        return self._eager(q, k, v, causal, mask)

    def _windowed(self, q) -> bool:
        return 0 < self.window < q.shape[2]

    def _eager(self, q, k, v, causal, mask):
        """Hugging Face eager attention: repeated K/V, scores, fp32 softmax cast back, dropout."""
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(q.shape[-1])
        scores = fn.softcap(torch.matmul(q, k.transpose(-1, -2)) * scale, self.softcap)   # gemma2: + tanh output
        if mask is not None:
            scores = scores + mask
        if causal:
            s = q.shape[2]
            tri = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
            if self._windowed(q):       # local layer: keys more than `window` positions back are masked too
                tri = tri | torch.ones(s, s, dtype=torch.bool, device=q.device).tril(-self.window)
            scores = scores.masked_fill(tri, float("-inf"))
        probs = torch.softmax(scores, -1, dtype=torch.float32).to(q.dtype)
        probs = fn.dropout(probs, self.dropout, self.training)
        return torch.matmul(probs, v)


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec, tr: Traits, adapters: Adapters | None):
        super().__init__()
        h, f, b = spec.hidden, spec.ffn_hidden, spec.mlp_bias
        self.gated, self.fused = spec.gated_mlp, spec.gated_mlp and tr.fused_gate_up
        if self.fused:                          # one gate_up matrix (phi3), one adapter when gate or up is targeted
            self.gate_up = make_linear(h, 2 * f, b, adapters, _on(adapters, "gate", "up"))
        elif self.gated:
            self.gate = make_linear(h, f, b, adapters, _on(adapters, "gate"))
        if not self.fused:
            self.up = make_linear(h, f, b, adapters, _on(adapters, "up"))
        self.down = make_linear(f, h, b, adapters, _on(adapters, "down"))
        self.act = _ACT[tr.activation]

    def forward(self, x):
        if self.fused:
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down(self.act(gate) * up)
        if self.gated:
            return self.down(self.act(self.gate(x)) * self.up(x))
        return self.down(self.act(self.up(x)))


class MoE(nn.Module):
    """Top-k routing over n_experts MLPs with capacity factor 1 (every expert gets tokens*k/E slots;
    balanced routing is what the memory of a trained router looks like; overflow tokens drop)."""

    def __init__(self, spec: ModelSpec, tr: Traits, adapters: Adapters | None):
        super().__init__()
        self.k, self.n = spec.experts_per_token, spec.n_experts
        self.router = make_linear(spec.hidden, self.n, False, adapters, False)
        self.experts = nn.ModuleList(MLP(spec, tr, adapters) for _ in range(self.n))

    def forward(self, x):
        b, s, h = x.shape
        flat = x.reshape(-1, h)
        tokens = flat.shape[0]
        probs = torch.softmax(self.router(flat).float(), -1)
        weight, expert = probs.topk(self.k, -1)                       # (tokens, k)
        cap = max(1, tokens * self.k // self.n)
        onehot = F.one_hot(expert.reshape(-1), self.n)                # (tokens*k, E)
        slot = ((onehot.cumsum(0) - 1) * onehot).sum(-1)              # position within its expert
        index = torch.where(slot < cap, expert.reshape(-1) * cap + slot, self.n * cap)
        routed = flat.repeat_interleave(self.k, 0)
        buf = flat.new_zeros(self.n * cap + 1, h).index_add(0, index, routed)
        outs = [e(buf[i * cap:(i + 1) * cap].unsqueeze(0)).squeeze(0) for i, e in enumerate(self.experts)]
        out = torch.cat(outs + [flat.new_zeros(1, h)], 0)[index]       # back to (tokens*k, h)
        out = (out.view(tokens, self.k, h) * weight.to(out.dtype).unsqueeze(-1)).sum(1)
        return out.view(b, s, h)
