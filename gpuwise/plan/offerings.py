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
    rows = [o for o in catalog.offerings
            if (not want_clouds or o.cloud in want_clouds) and (not want_gpus or o.gpu in want_gpus)]
    if regions:
        known = {o.region for o in rows}
        for r in regions:
            if r not in known:
                raise unknown_name("constraints.regions", r, known or catalog.regions())
        rows = [o for o in rows if o.region in set(regions)]
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
