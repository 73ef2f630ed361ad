"""Frenzy's memory-aware resource predictor (MARP) in its published form (Chang et al. 2024,
arXiv 2412.14479; formulas as summarised in papers.md section E.3, standard Megatron accounting):

    W       = V h + l (12 h^2 + 13 h)                      (GPT decoder, position table ignored)
    M_gpu   = bytes_per_param * W / (t p) + s b h l (10 + 24/t + 5 a s / (h t))

The full estimator (memory.py) generalises both terms; this module keeps the paper's form so its
worked vectors can be reproduced and compared.
"""

from __future__ import annotations

from gpuwise.estimate.activations import korthikanti_layer_bytes


def marp_params(V: int, h: int, l: int) -> int:
    """W: GPT-style parameter count without the position table."""
    return V * h + l * (12 * h * h + 13 * h)


def marp_bytes(V: int, h: int, l: int, a: int, s: int, b: int, t: int = 1, p: int = 1,
               bytes_per_param: float = 20.0, sp: bool = False) -> tuple[float, float]:
    """(static, activation) bytes per GPU. bytes_per_param: 20 (Megatron with fp32 gradient
    accumulation), 18 or 16 (ZeRO accounting). With 1F1B the first stage keeps about l layers of
    activations whatever p is, so p divides only the static term."""
    static = bytes_per_param * marp_params(V, h, l) / (t * p)
    return static, l * korthikanti_layer_bytes(s, b, h, a, t, sp)
