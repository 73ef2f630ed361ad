"""Dollars for a training run: cost = time x hourly price x nodes (Scavenger eq. 5, C = T*K*p).

Prices are whole-instance hourly prices (``Offering.hourly``); ``nodes`` instances are billed for the
whole wall-clock time, idle or not (cloud billing). The identity is exact by construction, so a
caller can check cost / (hours * nodes) == price.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import InputError


def training_cost(hours: float, price_per_node_hour: float, nodes: int | float) -> float:
    """C = T * K * p (Scavenger eq. 5): wall-clock hours x instances x price per instance-hour."""
    if hours < 0:
        raise InputError("hours", hours, "must be >= 0")
    if price_per_node_hour < 0:
        raise InputError("price", price_per_node_hour, "must be >= 0 USD per hour")
    if nodes <= 0:
        raise InputError("nodes", nodes, "must be > 0")
    return hours * nodes * price_per_node_hour


@dataclass(frozen=True)
class PriceQuote:
    """The hourly price used for an estimate and where it came from (stated in assumptions)."""

    usd_per_node_hour: float
    gpus_per_node: float
    source: str        # e.g. "--price", "aws p4d.24xlarge us-east-1 on-demand, catalog 2026-05-20"
    spot: bool = False
    offering: object | None = None   # the catalog Offering, when the price came from the catalog

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_node_hour / self.gpus_per_node if self.gpus_per_node else float("nan")


def cheapest_offering(gpu_name: str, gpus_per_node: int | None = None, spot: bool = False) -> PriceQuote | None:
    """Cheapest catalog instance with this GPU (per GPU-hour; with ``gpus_per_node`` only instances
    holding exactly that many). None if the catalog has none or is unavailable."""
    try:
        from gpuwise.hardware.catalog import load_catalog
    except ImportError:  # hardware layer not present
        return None
    cat = load_catalog()
    offers = [o for o in cat.filter(gpu=gpu_name, spot=spot) if o.hourly(spot)]
    if gpus_per_node is not None:
        exact = [o for o in offers if o.gpus_per_node == gpus_per_node]
        offers = exact or [o for o in offers if o.gpus_per_node >= 1]
    offers = [o for o in offers if o.gpus_per_node >= 1]
    if not offers:
        return None
    best = min(offers, key=lambda o: o.usd_per_gpu_hour(spot))
    kind = "spot" if spot else "on-demand"
    return PriceQuote(float(best.hourly(spot)), float(best.gpus_per_node),
                      f"{best.cloud} {best.instance_type} {best.region} {kind} ${best.hourly(spot):.4g}/h "
                      f"({best.gpus_per_node:g} GPUs), catalog {best.catalog_date}", spot, best)
