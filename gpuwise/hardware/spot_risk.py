"""Spot preemption risk per offering, derived from the bundled SkyPilot spot traces.

What the traces are (``gpuwise/data/spot_traces``, skypilot-org/spot-traces commit 221da1ab, collected for
"Can't Be Late", NSDI'24). Each file is ``{"metadata": {"gap_seconds": N}, "data": [...]}``: one value per
tick of N seconds, for one availability zone and instance type (file name ``<zone>_<type>_<n>.json``).

- ``preemption/1-node/aws-04-22-2023``: p3.2xlarge (1x V100), 4 zones, 7 days, 32 s ticks.
- ``preemption/4-node/aws-08-03-2023``: 4x p3.2xlarge kept running, 3 zones, 13 days, 300 s ticks.
- ``preemption/1-node/aws-04-19-2023``: r5.16xlarge (64 vCPU, no GPU), 3 zones, 7 days, 34 s ticks.
- ``preemption/1-node/gcp-04-30-2023``: c3-highcpu-88 (no GPU), 4 zones, 2 days, 30 s ticks.
- ``availability/``: launch probes of p3.2xlarge / p3.16xlarge / p2 (K80), 1-node and 16-node, AWS.

Polarity. Multi-node files hold the number of instances up (0..4, 0..16), as the upstream README says.
The 0/1 single-node files do not say which value means "up"; each family is checked against the
multi-node counts of the same kind (`polarity_evidence`):
- preemption 1-node: reading 1 = running, the time-up fraction agrees with the 4-node counts in the two
  shared zones (mean abs. difference 0.17, vs 0.31 for the opposite reading), every series starts at 0
  (the launch tick), and the GCP series are then 45 h of uninterrupted running instead of 45 h of outage
  right after launch. Used: 1 = running.
- availability 1-node: reading 1 = unavailable matches the 16-node counts better (mean abs. difference
  0.29 vs 0.35, and the same zone ranking: us-east-2b most available), which is also how the trace
  authors' simulator reads them (spot available = not value). Used: 1 = unavailable. These series only
  give the `availability` column (fraction of probes that could get a spot VM), not rates.

Rate. For every preemption series, events = sum over ticks of the drop in instances up
(max(0, up[t-1] - up[t])) and exposure = instance-hours up (sum of up[t] x gap). The rate per instance-hour
is events / exposure (maximum-likelihood rate of a Poisson process), with an exact Poisson 95% interval;
`mean_recovery_hours` is the mean length of the outages that follow a preemption. Rows are pooled per
(cloud, instance family, region) and per (cloud, family). The DEFAULT for a GPU offering without its own
trace is the pooled rate of all AWS V100 GPU traces (1-node + 4-node); CPU families get their own rows.

Several nodes. Preemptions are correlated: in the 4-node traces a single event often takes 2-4 nodes, so a
job needing all N nodes is interrupted less often than N x the instance rate. `node_exponent` b is fitted
as job_rate(4) / instance_rate = 4^b from the 4-node traces (b = 1 would be independent preemptions) and
`SpotRisk.job_rate_per_hour(n)` = rate x n^b; rows without multi-node traces use the pooled b. The fit
is at N = 4 only (pooled b = 0.158: a 4-node job is interrupted 1.25x as often as one node); larger N is
an extrapolation and is stated as such by the callers' assumptions.

The computed table is data, `gpuwise/data/spot_rates.csv`; regenerate it with
``python -m gpuwise.hardware.spot_risk --write`` (runtime never parses traces).
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from gpuwise.data import data_path, read_commented_csv
from gpuwise.errors import InputError
from gpuwise.hardware.types import Offering

TRACE_DIR = ("spot_traces",)
RATES_FILE = ("spot_rates.csv",)

# Trace instance label -> (family written in spot_rates.csv, GPU canonical name or "" for CPU instances)
_FAMILIES: dict[str, tuple[str, str]] = {
    "v100": ("V100-16GB-SXM2", "V100-16GB-SXM2"),   # p3.2xlarge: 1x V100 SXM2 16 GB
    "intel": ("cpu:r5.16xlarge", ""),
    "c3-88": ("cpu:c3-highcpu-88", ""),
}
# Which 0/1 value means "instance up" for single-node series, per trace kind (see module docstring).
UP_VALUE_1NODE = {"preemption": 1, "availability": 0}
DEFAULT_KEY = ("*", "gpu-default", "*")


@dataclass(frozen=True)
class SpotRisk:
    """Preemption risk of one spot offering and where the number comes from."""

    rate_per_hour: float                 # expected preemptions per instance-hour on spot
    source: str                          # which trace rows (or default) the rate was taken from
    rate_lo95: float | None = None       # exact Poisson 95% interval of the rate
    rate_hi95: float | None = None
    mean_recovery_hours: float | None = None  # mean outage after a preemption in the traces
    is_default: bool = False             # True when no trace matched this offering's cloud and GPU
    node_exponent: float = 1.0           # b: a job on N nodes is interrupted at rate x N^b (traces: b < 1)

    def job_rate_per_hour(self, nodes: int) -> float:
        """Interruptions per hour of a synchronous job that needs all `nodes` spot instances."""
        return self.rate_per_hour * max(1, nodes) ** self.node_exponent


@dataclass(frozen=True)
class TraceSeries:
    """One trace file, normalised to instances up per tick."""

    path: str          # relative to gpuwise/data/spot_traces
    kind: str          # "preemption" | "availability"
    cloud: str         # "aws" | "gcp"
    zone: str
    family: str        # instance family label from the file name, e.g. "v100"
    nodes: int         # instances the experiment kept (1, 4, 16)
    gap_seconds: float
    up: tuple[int, ...]


# <zone>_<family>[_<size>].json: size = GPUs (v100_1, v100_8) or vCPUs (intel_64) per instance
_NAME = re.compile(r"(?P<zone>[a-z]+-[a-z]+-?\d+-?[a-z])_(?P<family>[a-z0-9]+(?:-\d+)?)(?:_(?P<size>\d+))?\.json")


def _region_of(cloud: str, zone: str) -> str:
    # AWS zone us-east-1c -> region us-east-1; GCP zone us-central1-a -> region us-central1
    return zone[:-1] if cloud == "aws" else zone.rsplit("-", 1)[0]


def load_traces(root: Path | None = None) -> list[TraceSeries]:
    """Every trace under `root` (default: the bundled spot traces), normalised to instances up."""
    root = Path(root) if root is not None else data_path(*TRACE_DIR)
    out = []
    for f in sorted(root.rglob("*.json")):
        rel = f.relative_to(root)
        kind, nodes_dir, cloud_date = rel.parts[0], rel.parts[1], rel.parts[2]
        m = _NAME.fullmatch(f.name)
        if not m:  # never drop a trace silently
            raise InputError("spot trace", str(rel), "name it <zone>_<family>[_<size>].json")
        with open(f) as fh:
            obj = json.load(fh)
        values = [int(v) for v in obj["data"]]
        nodes = int(nodes_dir.split("-")[0])
        if nodes == 1:
            up_value = UP_VALUE_1NODE[kind]
            values = [1 if v == up_value else 0 for v in values]
        out.append(TraceSeries(path=str(rel), kind=kind, cloud=cloud_date.split("-")[0], zone=m["zone"],
                               family=m["family"], nodes=nodes, gap_seconds=float(obj["metadata"]["gap_seconds"]),
                               up=tuple(values)))
    return out


def preemptions_and_exposure(up: Sequence[int], gap_seconds: float) -> tuple[int, float, list[float]]:
    """(preemption events, instance-hours up, outage lengths in hours after each drop to zero)."""
    events = sum(max(0, a - b) for a, b in zip(up, up[1:]))
    exposure = sum(up) * gap_seconds / 3600.0
    outages, run, in_outage = [], 0, False
    for prev, cur in zip(up, up[1:]):
        if prev > 0 and cur == 0:
            in_outage, run = True, 0
        if in_outage:
            if cur == 0:
                run += 1
            else:
                outages.append(run * gap_seconds / 3600.0)
                in_outage = False
    return events, exposure, outages


def poisson_interval(events: int, exposure: float) -> tuple[float, float]:
    """Exact (Garwood) 95% interval of a Poisson rate from `events` in `exposure` hours."""
    from scipy.stats import chi2

    lo = 0.0 if events == 0 else chi2.ppf(0.025, 2 * events) / 2 / exposure
    hi = chi2.ppf(0.975, 2 * events + 2) / 2 / exposure
    return float(lo), float(hi)


def compute_rate_rows(traces: Iterable[TraceSeries] | None = None) -> list[dict[str, object]]:
    """The spot_rates.csv rows: per (cloud, family, region), per (cloud, family), and the GPU default."""
    all_traces = list(load_traces() if traces is None else traces)
    traces = [t for t in all_traces if t.kind == "preemption"]
    groups: dict[tuple[str, str, str], list[TraceSeries]] = {}
    for t in traces:
        family = _FAMILIES.get(t.family, (t.family, ""))[0]
        for key in ((t.cloud, family, _region_of(t.cloud, t.zone)), (t.cloud, family, "*")):
            groups.setdefault(key, []).append(t)
        if _FAMILIES.get(t.family, ("", ""))[1]:
            groups.setdefault(DEFAULT_KEY, []).append(t)
    availability = _availability_by_region([t for t in all_traces if t.kind == "availability"])
    pooled_exponent = node_scaling_exponent([t for t in traces if t.nodes > 1])
    rows = []
    for key in sorted(groups, key=lambda k: (k == DEFAULT_KEY, k)):
        members = groups[key]
        events = exposure = 0.0
        outages: list[float] = []
        for t in members:
            e, x, o = preemptions_and_exposure(t.up, t.gap_seconds)
            events, exposure = events + e, exposure + x
            outages += o
        lo, hi = poisson_interval(int(events), exposure)
        cloud, family, region = key
        rows.append({
            "cloud": cloud, "family": family, "region": region,
            "rate_per_hour": round(events / exposure, 5), "rate_lo95": round(lo, 5), "rate_hi95": round(hi, 5),
            "events": int(events), "exposure_hours": round(exposure, 2),
            "mean_recovery_hours": round(sum(outages) / len(outages), 3) if outages else "",
            "availability": availability.get((cloud, family, region), ""),
            "node_exponent": round(node_scaling_exponent([t for t in members if t.nodes > 1]) or pooled_exponent
                                   or 1.0, 3),
            "traces": len(members),
            "source": "; ".join(sorted({str(Path(t.path).parent) for t in members})),
        })
    return rows


def job_interruptions(up: Sequence[int], nodes: int, gap_seconds: float) -> tuple[int, float]:
    """(interruptions of a job needing all `nodes`, hours with all nodes up) of a multi-node series."""
    hits = sum(1 for a, b in zip(up, up[1:]) if a == nodes and b < nodes)
    return hits, sum(1 for v in up if v == nodes) * gap_seconds / 3600.0


def node_scaling_exponent(multi: Sequence[TraceSeries]) -> float | None:
    """b in job_rate(N) = instance_rate x N^b, from multi-node preemption traces (None without any).

    Independent preemptions give b = 1; b < 1 when one event takes several nodes at once.
    """
    if not multi:
        return None
    hits = full_hours = events = exposure = 0.0
    nodes = multi[0].nodes
    for t in multi:
        h, f = job_interruptions(t.up, t.nodes, t.gap_seconds)
        e, x, _ = preemptions_and_exposure(t.up, t.gap_seconds)
        hits, full_hours, events, exposure = hits + h, full_hours + f, events + e, exposure + x
    if not (hits and events and full_hours and exposure):
        return None
    return max(0.0, min(1.0, math.log((hits / full_hours) / (events / exposure)) / math.log(nodes)))


def _availability_by_region(traces: list[TraceSeries]) -> dict[tuple[str, str, str], float]:
    """Fraction of 1-node probe ticks at which a 1-GPU spot VM could be had, per (cloud, family, region)."""
    sums: dict[tuple[str, str, str], list[float]] = {}
    for t in traces:
        if t.nodes != 1 or not t.path.endswith("_1.json") or t.family not in _FAMILIES:
            continue
        family = _FAMILIES[t.family][0]
        for key in ((t.cloud, family, _region_of(t.cloud, t.zone)), (t.cloud, family, "*")):
            sums.setdefault(key, []).append(sum(t.up) / len(t.up))
    return {k: round(sum(v) / len(v), 3) for k, v in sums.items()}


def polarity_evidence(traces: list[TraceSeries] | None = None) -> list[dict[str, object]]:
    """For each 1-node family, time-up fractions under both readings next to the multi-node counts.

    Raw 0/1 series are re-read here (the loaded ones are already normalised); rows give, per shared zone,
    the fraction of ticks with value 1 and the multi-node mean fraction of instances up.
    """
    root = data_path(*TRACE_DIR)
    rows = []
    for kind, one_dir, multi_dir, n in (("preemption", "1-node/aws-04-22-2023", "4-node/aws-08-03-2023", 4),
                                        ("availability", "1-node/aws-02-15-2023", "16-node/aws-08-27-2023", 16)):
        for multi in sorted((root / kind / multi_dir).glob("*.json")):
            one = root / kind / one_dir / multi.name
            if not one.exists():
                continue
            raw = json.loads(one.read_text())["data"]
            counts = json.loads(multi.read_text())["data"]
            ones = sum(1 for v in raw if v == 1) / len(raw)
            rows.append({"kind": kind, "zone": multi.name.split("_")[0], "fraction_of_ones": round(ones, 3),
                         "multi_node_up_fraction": round(sum(counts) / (n * len(counts)), 3)})
    return rows


def write_rates(path: Path | None = None) -> Path:
    """Recompute the table from the bundled traces and write it (default: gpuwise/data/spot_rates.csv)."""
    path = Path(path) if path is not None else data_path(*RATES_FILE)
    rows = compute_rate_rows()
    with open(path, "w", newline="") as fh:
        fh.write("# Spot preemption rates per instance-hour, computed from gpuwise/data/spot_traces by\n"
                 "# `python -m gpuwise.hardware.spot_risk --write` (method: gpuwise/hardware/spot_risk.py).\n"
                 "# region '*' pools all zones; family 'gpu-default' pools every GPU trace (the documented default).\n")
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@lru_cache(maxsize=1)
def rate_table() -> dict[tuple[str, str, str], dict[str, str]]:
    """spot_rates.csv keyed by (cloud, family, region)."""
    return {(r["cloud"], r["family"], r["region"]): r for r in read_commented_csv(data_path(*RATES_FILE))}


def _risk(row: dict[str, str], source: str, default: bool) -> SpotRisk:
    def f(name: str) -> float | None:
        return float(row[name]) if row.get(name) not in (None, "") else None

    return SpotRisk(rate_per_hour=float(row["rate_per_hour"]), source=source, rate_lo95=f("rate_lo95"),
                    rate_hi95=f("rate_hi95"), mean_recovery_hours=f("mean_recovery_hours"), is_default=default,
                    node_exponent=f("node_exponent") or 1.0)


# Spot GPUs of one type in one zone that a plan can count on. The largest spot cluster in the bundled traces
# is 16 x p3.2xlarge (1 V100 each) in one AWS zone (availability/16-node/aws-08-27-2023), and all 16 were up
# only 42-46% of the probe ticks in each of its three zones (`zone_capacity_evidence`). Beyond 16 there is no
# evidence at all, so larger spot plans get a warning: an assumption from that trace, not a cloud quota.
SPOT_ZONE_GPUS = 16


def zone_capacity_evidence() -> list[dict[str, object]]:
    """Per zone of the 16-node availability traces: hours probed and the fraction of ticks with all 16 up."""
    rows = []
    for t in load_traces():
        if t.kind == "availability" and t.nodes == 16:
            rows.append({"zone": t.zone, "hours": round(len(t.up) * t.gap_seconds / 3600, 1),
                         "all_up_fraction": round(sum(1 for v in t.up if v == 16) / len(t.up), 3)})
    return rows


def zone_warning(gpus: int, gpu: str, zone: str | None) -> str | None:
    """A warning when a spot plan needs more GPUs of one type in one zone than the traces ever held."""
    if gpus <= SPOT_ZONE_GPUS:
        return None
    return (f"{gpus} spot {gpu} GPUs in one zone{f' ({zone})' if zone else ''}: more than the {SPOT_ZONE_GPUS} "
            "spot GPUs of one type the bundled traces ever held in one zone (16 x 1-GPU V100 VMs, all up only "
            "42-46% of the time, AWS 2023); capacity this large may not be obtainable, or not at once")


def preemption_rate_per_hour(offering: Offering) -> SpotRisk:
    """Spot preemption rate for an offering: its own (cloud, GPU, region) trace rate, else (cloud, GPU)
    pooled over zones, else the documented GPU default (all AWS V100 traces pooled)."""
    table = rate_table()
    for region in (offering.region, "*"):
        row = table.get((offering.cloud, offering.gpu, region))
        if row:
            where = "all traced zones" if region == "*" else f"region {region}"
            return _risk(row, f"{offering.cloud} {offering.gpu} spot traces ({where}): {row['events']} preemptions "
                              f"in {row['exposure_hours']} instance-hours ({row['source']})", False)
    row = table[DEFAULT_KEY]
    note = "" if offering.spot_price_usd_per_hour is not None else f"; note: {offering.cloud} lists no spot price here"
    return _risk(row, f"default: no {offering.cloud} {offering.gpu} trace; pooled AWS V100 spot traces, "
                      f"{row['events']} preemptions in {row['exposure_hours']} instance-hours{note}", True)


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gpuwise.hardware.spot_risk",
                                     description="recompute spot preemption rates from the bundled traces")
    parser.add_argument("--write", action="store_true", help="write gpuwise/data/spot_rates.csv")
    args = parser.parse_args(argv)
    print("polarity check (fraction of 1s in 1-node series vs multi-node mean fraction up, same zone):")
    for r in polarity_evidence():
        print(f"  {r['kind']:12s} {r['zone']:11s} ones={r['fraction_of_ones']:.3f} "
              f"multi-node up={r['multi_node_up_fraction']:.3f}")
    for r in compute_rate_rows():
        print(f"{r['cloud']:4s} {r['family']:18s} {r['region']:12s} rate={r['rate_per_hour']:.4f}/h "
              f"[{r['rate_lo95']:.4f}, {r['rate_hi95']:.4f}] events={r['events']} hours={r['exposure_hours']}")
    if args.write:
        print(f"wrote {write_rates()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
