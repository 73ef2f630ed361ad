"""Position information computed once per forward: rotary cos/sin, ALiBi and T5 relative biases."""

from __future__ import annotations

import math

import torch


def rotary(seq: int, dims: int, device, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of shape (seq, dims), fp32, for rotate-half rotary embeddings."""
    inv = 1.0 / (base ** (torch.arange(0, dims, 2, device=device, dtype=torch.float32) / dims))
    ang = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), -1)
    return ang.cos(), ang.sin()


def alibi_slopes(heads: int) -> list[float]:
    """Press et al. 2022 slopes: a geometric sequence starting at 2^(-8/n) (n rounded up to a power of 2)."""
    n = 2 ** math.floor(math.log2(heads))
    base = [2 ** (-8 * (i + 1) / n) for i in range(n)]
    extra = [2 ** (-4 * (2 * i + 1) / n) for i in range(heads - n)]
    return base + extra


def _causal(bias: torch.Tensor, q: int, k: int) -> torch.Tensor:
    if q != k:
        return bias
    mask = torch.ones(q, k, dtype=torch.bool, device=bias.device).triu(1)
    return bias.masked_fill(mask, float("-inf"))


def alibi(heads: int, q: int, k: int, dtype, device) -> torch.Tensor:
    """(1, heads, q, k) additive bias: slope * -(distance), causal when q == k."""
    slopes = torch.tensor(alibi_slopes(heads), device=device).view(1, heads, 1, 1)
    dist = (torch.arange(k, device=device).view(1, k) - torch.arange(q, device=device).view(q, 1)).float()
    return _causal(slopes * dist.clamp(max=0), q, k).to(dtype)


def t5_buckets(q: int, k: int, bidirectional: bool, device, buckets: int = 32, max_distance: int = 128):
    """T5's relative-position buckets (Raffel et al. 2020): exact for short distances, log-spaced beyond."""
    rel = torch.arange(k, device=device).view(1, k) - torch.arange(q, device=device).view(q, 1)
    out = torch.zeros_like(rel)
    if bidirectional:
        buckets //= 2
        out = out + (rel > 0).long() * buckets
        rel = rel.abs()
    else:
        rel = -rel.clamp(max=0)
    exact = buckets // 2
    large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                     * (buckets - exact)).long()
    large = large.clamp(max=buckets - 1)
    return out + torch.where(rel < exact, rel, large)


def t5_bias(table: torch.nn.Embedding, q: int, k: int, causal: bool, dtype) -> torch.Tensor:
    """(1, heads, q, k) learned relative bias (+ causal mask for the decoder)."""
    idx = t5_buckets(q, k, not causal, table.weight.device)
    bias = table(idx).permute(2, 0, 1).unsqueeze(0)
    return (_causal(bias, q, k) if causal else bias).to(dtype)
