"""DeepVM's final decision and its baselines (papers.md D.4, D.6)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .architectures import SINGLE_ANCHOR, Configuration, single_anchor, tiering
from .data import DeepVMData
from .flopp import flopp, rank_by_flopp
from .overheads import scaling_factor

# Remote buffer sizing (DeepVM artifact defaults): checkpoint of 2 x 100 MB, buffer factor 0.5;
# only their product (GB of RAM each checkpoint VM must hold) enters constraint (C2).
DEFAULT_CHECKPOINT_GB = 0.2
DEFAULT_BUFFER_FACTOR = 0.5


def _rank_key(c: Configuration) -> tuple:
    # Higher objective, then lower hourly price, then catalogue order. Z is rounded to 12
    # significant digits so float noise cannot reorder configurations the paper calls equal.
    z = float(f"{c.objective:.12g}")
    return (-z, round(c.hourly_usd, 9), c.order)


def rank(configs: list[Configuration]) -> list[Configuration]:
    return sorted(configs, key=_rank_key)


def deepvm(data: DeepVMData, budget: float, checkpoint_gb: float = DEFAULT_CHECKPOINT_GB,
           buffer_factor: float = DEFAULT_BUFFER_FACTOR, use_sf: bool = True) -> list[Configuration]:
    """Every feasible single-anchor and tiering configuration, best first."""
    need = checkpoint_gb * buffer_factor
    return rank(single_anchor(data, budget, use_sf) + tiering(data, budget, need, use_sf))


def _sa_baseline(data: DeepVMData, v, budget: float) -> Configuration | None:
    """Single-anchor with as many spot nodes as the budget allows: floor((PW - P_od) / P_spot)."""
    if v.ondemand_price + v.spot_price > budget + 1e-9:
        return None
    n_spot = math.floor((budget - v.ondemand_price) / v.spot_price + 1e-9)
    n_spot = min(n_spot, data.max_nodes(v, spot=True) - 1)
    n = n_spot + 1
    sf = scaling_factor(data.scaling[v.name], n)
    gi = data.instances.index(v)
    return Configuration(SINGLE_ANCHOR, v.name, n, n_spot, None, 0,
                         v.ondemand_price + n_spot * v.spot_price, flopp(v) * n * sf,
                         v.eflops * n * sf, sf, (gi, -1, n))


def cost_first(data: DeepVMData, budget: float) -> Configuration | None:
    """The GPU type that buys the most nodes (ties: first in the catalogue), single-anchor style."""
    best = None
    for v in data.gpu_instances:
        c = _sa_baseline(data, v, budget)
        if c is not None and (best is None or c.gpu_nodes > best.gpu_nodes):
            best = c
    return best


def performance_first(data: DeepVMData, budget: float) -> Configuration | None:
    """The affordable GPU type (1 on-demand + >= 1 spot) with the highest eFLOPS, max spot nodes."""
    best = None
    for v in data.gpu_instances:
        c = _sa_baseline(data, v, budget)
        if c is not None and (best is None or v.eflops > data.instances[best.order[0]].eflops):
            best = c
    return best


def min_budget(data: DeepVMData, checkpoint_gb: float = DEFAULT_CHECKPOINT_GB,
               buffer_factor: float = DEFAULT_BUFFER_FACTOR) -> float | None:
    """Cheapest hourly price of any DeepVM configuration (the nearest feasible budget)."""
    configs = deepvm(data, math.inf, checkpoint_gb, buffer_factor)
    return min((c.hourly_usd for c in configs), default=None)


@dataclass(frozen=True)
class DeepVMResult:
    budget: float
    ranked: list[Configuration]              # DeepVM, best first (top k)
    noscale: Configuration | None            # DeepVM-NoScale's pick (Z = FLOPP * n)
    cost_first: Configuration | None
    performance_first: Configuration | None
    flopp_ranking: list[tuple[str, float]]
    feasible_count: int
    assumptions: list[str]


def recommend(data: DeepVMData, budget: float, top: int = 3,
              checkpoint_gb: float = DEFAULT_CHECKPOINT_GB,
              buffer_factor: float = DEFAULT_BUFFER_FACTOR) -> DeepVMResult:
    all_ranked = deepvm(data, budget, checkpoint_gb, buffer_factor)
    noscale = deepvm(data, budget, checkpoint_gb, buffer_factor, use_sf=False)
    assumptions = [
        f"DeepVM tables from {data.source} (AWS prices as used in the paper, 2024; GPU spot = 30% "
        "of on-demand there)",
        "FLOPP = eFLOPS score / spot price (as the DeepVM artifact, also for the on-demand anchor)",
        "SF(n): logistic fit of measured data-parallel speedup per GPU VM type (CIFAR-10, batch 128 "
        "per GPU); objective Z = FLOPP * n * SF(n)",
        f"tiering remote RAM needed: checkpoint {checkpoint_gb:g} GB x buffer {buffer_factor:g}; "
        "n_sat looked up at min(GPU VM, remote VM) bandwidth, floor to the table's rows",
        "exhaustive integer enumeration (exact optimum); ties: higher Z, then lower $/h, then "
        "catalogue order",
        "preemption is handled structurally (on-demand anchor / checkpoint tier), not priced",
    ]
    return DeepVMResult(budget, all_ranked[:top], noscale[0] if noscale else None,
                        cost_first(data, budget), performance_first(data, budget),
                        [(i.name, f) for i, f in rank_by_flopp(list(data.instances))],
                        len(all_ranked), assumptions)
