"""Spot preemption rates from the bundled SkyPilot spot traces (Can't Be Late, NSDI'24 data).

Rates are maximum-likelihood Poisson rates (events / instance-hours up); intervals are exact Garwood
intervals (Garwood 1936: zero events in T hours -> upper 95% bound 3.689/T, checked to 1e-3).
"""

import math

import pytest
from hypothesis import given, strategies as st

from gpuwise.data import data_path
from gpuwise.hardware.catalog import load_catalog
from gpuwise.hardware.spot_risk import (
    DEFAULT_KEY, compute_rate_rows, load_traces, poisson_interval, polarity_evidence,
    preemption_rate_per_hour, preemptions_and_exposure, rate_table,
)
from gpuwise.hardware.types import Offering


def offering(cloud="aws", region="us-east-1", gpu="V100-16GB-SXM2", spot=1.0):
    return Offering(cloud=cloud, region=region, zone=None, instance_type="x", gpu=gpu, gpus_per_node=1,
                    vcpus=8, memory_gib=61, price_usd_per_hour=3.06, spot_price_usd_per_hour=spot,
                    catalog_date="2026-05-20", catalog_source="test")


def test_committed_table_matches_the_traces():
    # gpuwise/data/spot_rates.csv must be exactly what the generator computes from the bundled traces.
    table = rate_table()
    rows = compute_rate_rows()
    assert len(rows) == len(table)
    for r in rows:
        t = table[(r["cloud"], r["family"], r["region"])]
        assert float(t["rate_per_hour"]) == pytest.approx(r["rate_per_hour"], abs=1e-5)
        assert int(t["events"]) == r["events"]


def test_polarity_choice_agrees_with_multi_node_counts():
    ev = polarity_evidence()
    for kind, up_is_one in (("preemption", True), ("availability", False)):
        rows = [r for r in ev if r["kind"] == kind]
        assert rows
        chosen = sum(abs((r["fraction_of_ones"] if up_is_one else 1 - r["fraction_of_ones"])
                         - r["multi_node_up_fraction"]) for r in rows)
        other = sum(abs((1 - r["fraction_of_ones"] if up_is_one else r["fraction_of_ones"])
                        - r["multi_node_up_fraction"]) for r in rows)
        assert chosen < other, kind


def test_traces_normalised_and_every_file_read():
    traces = load_traces()
    assert len(traces) == len(list(data_path("spot_traces").rglob("*.json"))) == 34
    for t in traces:
        assert t.gap_seconds > 0 and all(0 <= v <= t.nodes for v in t.up)
    # 1-node preemption series start at the launch tick (nothing up yet) under the chosen reading
    assert all(t.up[0] == 0 for t in traces if t.kind == "preemption" and t.nodes == 1)


def test_event_counting_on_known_series():
    events, hours, outages = preemptions_and_exposure([0, 1, 1, 0, 0, 1, 1, 1], 3600)
    assert (events, hours, outages) == (1, 5.0, [2.0])
    events, hours, _ = preemptions_and_exposure([4, 4, 2, 2, 0, 4], 1800)
    assert (events, hours) == (4, 8.0)  # 4+4+2+2+4 = 16 instance-ticks of half an hour


def test_garwood_interval():
    lo, hi = poisson_interval(0, 100.0)
    assert lo == 0 and hi == pytest.approx(3.689 / 100, abs=1e-5)
    lo, hi = poisson_interval(10, 10.0)
    assert lo < 1.0 < hi and lo == pytest.approx(0.4795, abs=1e-3) and hi == pytest.approx(1.8390, abs=1e-3)


@given(st.lists(st.integers(0, 4), min_size=2, max_size=200), st.floats(1, 3600))
def test_events_bounded_by_exposure(series, gap):
    events, hours, outages = preemptions_and_exposure(series, gap)
    assert 0 <= events <= sum(series) and hours == pytest.approx(sum(series) * gap / 3600)
    assert all(o > 0 for o in outages)


def test_rates_sane_and_default_documented():
    table = rate_table()
    default = table[DEFAULT_KEY]
    rate = float(default["rate_per_hour"])
    assert 0.05 < rate < 2.0  # once per 0.5 to 20 hours on AWS V100 spot
    for row in table.values():
        assert float(row["rate_lo95"]) <= float(row["rate_per_hour"]) <= float(row["rate_hi95"])


def test_lookup_order_region_then_cloud_then_default():
    r = preemption_rate_per_hour(offering(region="us-east-1"))
    assert not r.is_default and "region us-east-1" in r.source
    assert r.rate_per_hour == pytest.approx(float(rate_table()[("aws", "V100-16GB-SXM2", "us-east-1")]["rate_per_hour"]))
    pooled = preemption_rate_per_hour(offering(region="eu-west-1"))
    assert not pooled.is_default and "all traced zones" in pooled.source
    d = preemption_rate_per_hour(offering(cloud="gcp", region="us-central1", gpu="A100-40GB-SXM"))
    assert d.is_default and d.source.startswith("default") and d.rate_per_hour > 0
    assert "no spot price" in preemption_rate_per_hour(offering(cloud="lambda", gpu="H100-80GB-SXM", spot=None)).source


def test_every_bundled_spot_offering_gets_a_rate():
    for o in load_catalog(include_user=False).filter(spot=True)[:500]:
        risk = preemption_rate_per_hour(o)
        assert risk.rate_per_hour >= 0 and risk.source and math.isfinite(risk.rate_per_hour)


def test_job_interruptions_and_node_exponent():
    from gpuwise.hardware.spot_risk import job_interruptions, node_scaling_exponent

    hits, hours = job_interruptions([4, 4, 2, 4, 4, 0, 0, 4], 4, 3600)
    assert (hits, hours) == (2, 5.0)
    multi = [t for t in load_traces() if t.kind == "preemption" and t.nodes == 4]
    b = node_scaling_exponent(multi)
    assert 0 < b < 1  # correlated preemptions: fewer job interruptions than 4 independent nodes
    assert b == pytest.approx(float(rate_table()[DEFAULT_KEY]["node_exponent"]), abs=1e-3)
    assert node_scaling_exponent([]) is None


def test_job_rate_scales_sublinearly_with_nodes():
    r = preemption_rate_per_hour(offering(region="us-west-2"))
    assert r.job_rate_per_hour(1) == r.rate_per_hour
    rates = [r.job_rate_per_hour(n) for n in (1, 2, 4, 8, 16)]
    assert rates == sorted(rates) and rates[-1] < 16 * rates[0]


def test_zone_capacity_note_matches_the_traces():
    from gpuwise.hardware.spot_risk import SPOT_ZONE_GPUS, zone_capacity_evidence, zone_warning

    rows = zone_capacity_evidence()
    assert len(rows) == 3 and all(r["hours"] > 200 for r in rows)
    lo, hi = min(r["all_up_fraction"] for r in rows), max(r["all_up_fraction"] for r in rows)
    assert f"{lo * 100:.0f}-{hi * 100:.0f}%" == "42-46%" and "42-46%" in zone_warning(SPOT_ZONE_GPUS + 1, "H100", None)
    assert zone_warning(SPOT_ZONE_GPUS, "H100", "z") is None
