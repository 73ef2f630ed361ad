"""Residual blocks: pre-norm (llama, gpt2, t5 ...), post-norm (bert), parallel residual with one
norm (gptj, phi, falcon-7b) or two (gpt_neox, falcon-40b); t5 decoder blocks add cross-attention.
Under sequence parallelism the residual stream holds seq/tp tokens: the input of each attention or
MLP is all-gathered (and kept by its linear layers, as DTensor-based TP does) and the row-parallel
output reduce-scattered."""

from __future__ import annotations

from torch import nn

from gpuwise.nn import functions as fn
from gpuwise.nn.layers import MLP, Adapters, Attention, MoE, Shard, make_norm
from gpuwise.nn.traits import Traits
from gpuwise.workload.model_spec import ModelSpec

def single_norm(spec: ModelSpec) -> bool:
    return spec.norms_per_block == 1


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, tr: Traits, shard: Shard, adapters: Adapters | None, attention: str, *,
                 causal: bool = True, cross: bool = False, layer: int = 0):
        super().__init__()
        self.norm1 = make_norm(spec)
        self.attn = Attention(spec, tr, shard, adapters, attention, causal, window=spec.sliding_window
                              if causal and spec.is_sliding(layer) else 0)
        # Gemma 2: an RMSNorm on each branch's output before the residual add (post_attention_layernorm,
        # post_feedforward_layernorm); identity elsewhere
        self.post1 = make_norm(spec) if spec.post_norms else nn.Identity()
        self.post2 = make_norm(spec) if spec.post_norms else nn.Identity()
        self.cross_norm = make_norm(spec) if cross else None
        self.cross_attn = Attention(spec, tr, shard, adapters, attention, False, cross=True) if cross else None
        self.norm2 = None if single_norm(spec) else make_norm(spec)
        self.mlp = MoE(spec, tr, adapters) if spec.n_experts > 1 else MLP(spec, tr, adapters)
        self.parallel, self.post, self.p = spec.parallel_attn_mlp, tr.post_norm, tr.dropout
        self.ways = shard.sp_ways

    def _g(self, t):
        return fn.gather(t, self.ways, 1)

    def _s(self, t):
        return fn.scatter(t, self.ways, 1)

    def _d(self, t):
        return fn.dropout(t, self.p, self.training)

    def forward(self, x, rope=None, bias=None, enc=None):
        if self.post:                                   # bert: x = LN(x + drop(f(x)))
            x = self.norm1(x + self._d(self._s(self.attn(self._g(x), rope, bias))))
            return self.norm2(x + self._d(self._s(self.mlp(self._g(x)))))
        if self.parallel:                               # x + attn(LN(x)) + mlp(LN'(x))
            n1 = self._g(self.norm1(x))
            n2 = n1 if self.norm2 is None else self._g(self.norm2(x))
            return x + self._d(self._s(self.attn(n1, rope, bias) + self.mlp(n2)))
        x = x + self._d(self.post1(self._s(self.attn(self._g(self.norm1(x)), rope, bias))))
        if self.cross_attn is not None:
            x = x + self._d(self._s(self.cross_attn(self._g(self.cross_norm(x)), kv_x=enc)))
        return x + self._d(self.post2(self._s(self.mlp(self._g(self.norm2(x))))))
