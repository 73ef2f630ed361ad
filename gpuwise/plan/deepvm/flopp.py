"""FLOPP: effective FLOPs per dollar of a GPU VM (DeepVM Sec. instance-level analysis)."""

from __future__ import annotations

from .data import Instance

SECONDS_PER_HOUR = 3600.0


def flopp(inst: Instance) -> float:
    """eFLOPS / price, per USD. Like the DeepVM artifact this always uses the *spot* price, also
    for single-anchor whose anchor is on-demand (papers.md D.2): the score ranks instance types,
    the on-demand anchor's price only enters the budget constraint."""
    if inst.eflops is None:
        raise ValueError(f"{inst.name} is not a GPU instance")
    return inst.eflops / inst.spot_price * SECONDS_PER_HOUR


def rank_by_flopp(instances: list[Instance]) -> list[tuple[Instance, float]]:
    """GPU instances, highest FLOPP first (ties keep catalogue order: sorted() is stable)."""
    scored = [(i, flopp(i)) for i in instances if i.is_gpu]
    return sorted(scored, key=lambda t: -t[1])
