"""The two DeepVM architectures and their feasible configurations (papers.md D.5).

The paper calls the architecture-level step "linear programming"; the objective
FLOPP(v) * n * SF_v(n) is non-linear in n, and the integer space is tiny (GPU types x remote types
x n <= quota), so we enumerate it exhaustively: the result is exactly the optimum of the integer
programme, with no solver tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

from .data import DeepVMData, Instance
from .flopp import flopp
from .overheads import n_sat, scaling_factor

SINGLE_ANCHOR = "single-anchor"
TIERING = "tiering"
BUDGET_EPS = 1e-9   # prices are given to 4 decimals; guard float sums like 0.1578*17 + 0.17


@dataclass(frozen=True)
class Configuration:
    """One cluster: GPU VMs (some spot, maybe an on-demand anchor) + optional CPU checkpoint VMs."""

    architecture: str               # "single-anchor" | "tiering"
    gpu_instance: str
    gpu_nodes: int                  # all GPU VMs (they all train)
    spot_gpu_nodes: int             # of which spot (single-anchor: gpu_nodes - 1)
    remote_instance: str | None     # tiering: on-demand CPU checkpoint VM type
    remote_nodes: int               # 0 when none
    hourly_usd: float
    objective: float                # Z = FLOPP * n * SF(n) (or FLOPP * n without scaling)
    performance: float              # eFLOPS * n * SF(n): the paper's cluster performance
    scaling_factor: float
    order: tuple[int, int, int]     # catalogue order (GPU index, remote index, n) for ties

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in (
            "architecture", "gpu_instance", "gpu_nodes", "spot_gpu_nodes", "remote_instance",
            "remote_nodes", "hourly_usd", "objective", "performance", "scaling_factor")}
        d["ondemand_gpu_nodes"] = self.gpu_nodes - self.spot_gpu_nodes
        d["hourly_usd"] = round(self.hourly_usd, 6)
        return d


def _objective(data: DeepVMData, v: Instance, n: int, use_sf: bool) -> tuple[float, float, float]:
    sf = scaling_factor(data.scaling[v.name], n)
    z = flopp(v) * n * (sf if use_sf else 1.0)
    return z, v.eflops * n * sf, sf


def single_anchor(data: DeepVMData, budget: float, use_sf: bool = True) -> list[Configuration]:
    """1 on-demand anchor + (n-1) spot VMs of one GPU type; 2 <= n <= N_v - 1 (the artifact's
    range excludes N_v); budget P_od + (n-1) P_spot <= PW."""
    out = []
    for gi, v in enumerate(data.instances):
        if not v.is_gpu:
            continue
        for n in range(2, data.max_nodes(v, spot=True)):
            price = v.ondemand_price + (n - 1) * v.spot_price
            if price > budget + BUDGET_EPS:
                break   # price grows with n
            z, perf, sf = _objective(data, v, n, use_sf)
            out.append(Configuration(SINGLE_ANCHOR, v.name, n, n - 1, None, 0, price, z, perf, sf,
                                     (gi, -1, n)))
    return out


def tiering(data: DeepVMData, budget: float, checkpoint_buffer_gb: float,
            use_sf: bool = True) -> list[Configuration]:
    """n spot GPU VMs + m on-demand CPU VMs holding checkpoint shards in RAM.

    (C1) n P_spot + m P_od_w <= PW; (C2) Mem_w >= checkpoint x buffer; (C3) n/m < n_sat(min BW);
    1 <= n <= N_v - 1, 1 <= m <= M_w - 1. The objective ignores (w, m), so for each (v, n, w) only
    the cheapest feasible m = floor(n / n_sat) + 1 is kept (larger m: same Z, higher price).
    """
    out = []
    for gi, v in enumerate(data.instances):
        if not v.is_gpu:
            continue
        for wi, w in enumerate(data.instances):
            if w.is_gpu or w.memory_gb < checkpoint_buffer_gb:
                continue
            sat = n_sat(data.saturation, min(v.network_gbps, w.network_gbps))
            m_max = data.max_nodes(w, spot=False) - 1
            for n in range(1, data.max_nodes(v, spot=True)):
                m = n // sat + 1
                if m > m_max:
                    break
                price = n * v.spot_price + m * w.ondemand_price
                if price > budget + BUDGET_EPS:
                    break
                z, perf, sf = _objective(data, v, n, use_sf)
                out.append(Configuration(TIERING, v.name, n, n, w.name, m, price, z, perf, sf,
                                         (gi, wi, n)))
    return out
