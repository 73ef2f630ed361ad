"""The catalog side of candidate generation: which offerings a job may rent, one row per
(cloud, region, instance type), as numpy columns.

Catalog rows are per zone; SkyPilot launches in the cheapest zone of a region, so a region's
on-demand and spot prices are the minima over its zones (each kept separately: the cheapest
spot zone need not be the cheapest on-demand zone).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.errors import unknown_name
from gpuwise.hardware.types import Offering

# Cluster sizes considered, in nodes; capped by the job's max GPUs. Powers of two plus the
# midpoints keep the time/cost curve dense enough for a knee without exploding the search.
NODE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
DEFAULT_MAX_GPUS = 512   # when the job gives no max_gpus


@dataclass(frozen=True)
class RegionOffering:
    """One (cloud, region, instance type) with its cheapest zone prices."""

    cloud: str
    region: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    price: float | None          # on-demand USD per node-hour (cheapest zone)
    spot_price: float | None     # spot USD per node-hour (cheapest zone), None if no spot
    zone: str | None             # a zone with the on-demand price (informational)
    spot_zone: str | None
    catalog_date: str
    example: Offering            # one catalog row (for spot-risk lookups)


def region_offerings(offerings: list[Offering]) -> list[RegionOffering]:
    """Collapse zones; drop fractional-GPU rows (shared GPUs cannot host a training replica)."""
    groups: dict[tuple[str, str, str], list[Offering]] = {}
    for o in offerings:
        if o.gpus_per_node < 1 or not float(o.gpus_per_node).is_integer():
            continue
        groups.setdefault((o.cloud, o.region, o.instance_type), []).append(o)
    out = []
    for (cloud, region, it), rows in groups.items():
        od = [r for r in rows if r.price_usd_per_hour]
        sp = [r for r in rows if r.spot_price_usd_per_hour]
        best_od = min(od, key=lambda r: r.price_usd_per_hour) if od else None
        best_sp = min(sp, key=lambda r: r.spot_price_usd_per_hour) if sp else None
        if best_od is None and best_sp is None:
            continue
        first = rows[0]
        out.append(RegionOffering(
            cloud, region, it, first.gpu, int(first.gpus_per_node),
            best_od.price_usd_per_hour if best_od else None,
            best_sp.spot_price_usd_per_hour if best_sp else None,
            best_od.zone if best_od else None, best_sp.zone if best_sp else None,
            first.catalog_date, best_sp or best_od))
    out.sort(key=lambda r: (r.cloud, r.region, r.instance_type))
    return out


def filter_offerings(catalog, clouds: list[str], regions: list[str], gpus: list[str]) -> tuple[list[Offering], list[str]]:
    """Catalog rows allowed by the job's clouds, regions and GPU types (names checked).

    Returns (rows, canonical GPU names asked for). Unknown names raise InputError naming the field.
    """
    from gpuwise.hardware.gpus import user_gpu

    known_clouds = catalog.clouds()
    want_clouds = set()
    for c in clouds:
        if c.strip().lower() not in known_clouds:
            raise unknown_name("constraints.clouds / --cloud", c, known_clouds)
        want_clouds.add(c.strip().lower())
    want_gpus = []
    for g in gpus:
        want_gpus.append(user_gpu(g, "constraints.gpus / --gpu").name)   # InputError with the closest names if unknown
    # the user's own --offerings rows are what they asked to plan on: the spec's clouds and regions
    # (which name the catalog's) do not filter them out
    own = getattr(catalog, "user_offerings", frozenset())
    rows = [o for o in catalog.offerings
            if (not want_clouds or o.cloud in want_clouds or o in own) and (not want_gpus or o.gpu in want_gpus)]
    if regions:
        known = {o.region for o in rows}
        for r in regions:
            if r not in known:
                raise unknown_name("constraints.regions", r, known or catalog.regions())
        rows = [o for o in rows if o.region in set(regions) or o in own]
    return rows, want_gpus


def node_counts(gpus_per_node: int, max_gpus: int | None) -> list[int]:
    cap = max_gpus if max_gpus else DEFAULT_MAX_GPUS
    return [n for n in NODE_COUNTS if n * gpus_per_node <= cap]


def columns(rows: list[RegionOffering]) -> dict[str, np.ndarray]:
    """Numpy columns of the region offerings (NaN where a price is missing)."""
    return {
        "gpn": np.array([r.gpus_per_node for r in rows], dtype=np.int64),
        "price": np.array([r.price if r.price else np.nan for r in rows], dtype=float),
        "spot_price": np.array([r.spot_price if r.spot_price else np.nan for r in rows], dtype=float),
    }


# ---------------------------------------------------------------------------------------------
# spot prices too good to plan on

# A spot price is an outlier when its ratio to the GPU type's median on-demand price (both per GPU-hour)
# is below OUTLIER_FRACTION x the OUTLIER_PERCENTILE-th percentile of that ratio over the type's spot
# offerings in the whole loaded catalog (region rows, every cloud). On the bundled catalog this flags the
# single-zone H200 $0.85, L4 $0.09 and A100-40GB $0.31 spot rows while typical discounts (ratios 0.15-0.7)
# stay in; per-type, because clouds discount GPU types very differently (Azure spot is 0.18 x on-demand
# throughout, AWS H200 0.1-0.5). Types with fewer than OUTLIER_MIN_OFFERS spot offerings are not judged.
OUTLIER_FRACTION = 0.5
OUTLIER_PERCENTILE = 10
OUTLIER_MIN_OFFERS = 5


@dataclass(frozen=True)
class SpotFloor:
    """One GPU type's spot outlier floor, per GPU-hour."""

    gpu: str
    od_median: float       # median on-demand USD per GPU-hour of the type
    p_ratio: float         # OUTLIER_PERCENTILE-th percentile of spot / od_median
    offers: int            # spot offerings the percentile is over

    @property
    def floor_ratio(self) -> float:
        return OUTLIER_FRACTION * self.p_ratio

    @property
    def floor_usd(self) -> float:
        return self.floor_ratio * self.od_median


def is_user_priced(o: RegionOffering | Offering) -> bool:
    """A row of the user's offerings file (plan.user_prices): its prices are never judged."""
    from gpuwise.plan.user_prices import USER_SOURCE

    ex = getattr(o, "example", o)
    return ex.catalog_source.startswith(USER_SOURCE)


def spot_floors(offs: list[RegionOffering]) -> dict[str, SpotFloor]:
    """GPU type -> its spot floor, from catalog region rows (user prices left out)."""
    od: dict[str, list[float]] = {}
    sp: dict[str, list[float]] = {}
    for o in offs:
        if is_user_priced(o):
            continue
        if o.price:
            od.setdefault(o.gpu, []).append(o.price / o.gpus_per_node)
        if o.spot_price:
            sp.setdefault(o.gpu, []).append(o.spot_price / o.gpus_per_node)
    out = {}
    for gpu, spots in sp.items():
        if gpu in od and len(spots) >= OUTLIER_MIN_OFFERS:
            med = float(np.median(od[gpu]))
            out[gpu] = SpotFloor(gpu, med, float(np.percentile(np.array(spots) / med, OUTLIER_PERCENTILE)),
                                 len(spots))
    return out


def spot_outliers(offs: list[RegionOffering], floors: dict[str, SpotFloor]) -> np.ndarray:
    """Per region offering: True when its spot price is below its GPU type's floor."""
    def low(o: RegionOffering) -> bool:
        f = floors.get(o.gpu)
        return bool(f and o.spot_price and not is_user_priced(o)
                    and o.spot_price / o.gpus_per_node < f.floor_usd)
    return np.array([low(o) for o in offs], dtype=bool)


def outlier_rule() -> str:
    return (f"a spot price counts as an outlier when spot / the GPU type's median on-demand price (per GPU-hour) "
            f"is below {OUTLIER_FRACTION:g} x the {OUTLIER_PERCENTILE}th percentile of that ratio over the "
            f"type's spot offerings in the catalog (types with >= {OUTLIER_MIN_OFFERS} spot offerings; "
            "prices you give are never flagged)")


# ---------------------------------------------------------------------------------------------
# the network of a node

NODE_NETWORK_NOTE = ("inter-node bandwidth per node = the GPU class's full-node NIC (step_time.default_inter_node_gbps) "
                     "x the node's share of the largest node of that GPU in the catalog (assumption: cloud VMs get "
                     "network in proportion to their size; a 1-GPU L4 VM of an 8-GPU host gets 12.5 Gb/s, and "
                     "DeepVM's AWS table lists 10-25 Gb/s for 1-GPU g5/g4dn VMs)")


def _largest_nodes(market: list[Offering]) -> dict[str, float]:
    """GPU -> the most GPUs one catalog node of it holds (the host a smaller VM is a share of)."""
    full: dict[str, float] = {}
    for o in market:
        if o.gpus_per_node >= 1:
            full[o.gpu] = max(full.get(o.gpu, 0.0), o.gpus_per_node)
    return full


def _share_gbps(gpu: str, gpus_per_node: int, full: dict[str, float]) -> float:
    from gpuwise.estimate.step_time import default_inter_node_gbps
    from gpuwise.hardware.gpus import get_gpu

    host = max(full.get(gpu, 0.0), gpus_per_node)
    return default_inter_node_gbps(get_gpu(gpu))[0] * gpus_per_node / host


def node_network(offs: list[RegionOffering], market: list[Offering]) -> dict[tuple[str, int], float]:
    """(GPU, GPUs per node) -> NIC bandwidth in GB/s of the offerings' node shapes (see NODE_NETWORK_NOTE):
    ZeRO-3 over eight 1-GPU VMs then pays for their network, not for an 8-GPU host's."""
    full = _largest_nodes(market)
    return {(o.gpu, o.gpus_per_node): _share_gbps(o.gpu, o.gpus_per_node, full) for o in offs}


def vm_network_gbps(gpu: str, gpus_per_node: int, catalog) -> float | None:
    """The node network `plan` gives a ``gpus_per_node``-GPU node of ``gpu`` (its share of the largest
    catalog host's NIC), for `estimate` on the same shape; None when the catalog has no such GPU."""
    full = _largest_nodes(getattr(catalog, "market", None) or catalog.offerings)
    return _share_gbps(gpu, gpus_per_node, full) if gpu in full else None
