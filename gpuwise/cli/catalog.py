"""`gpuwise catalog`: cloud GPU offerings from the SkyPilot v8 catalogs, cheapest per GPU-hour first."""

from __future__ import annotations

import argparse
import dataclasses


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", help="GPU name or alias, e.g. H100, A100-80GB, L4 (see `gpuwise gpus`)")
    parser.add_argument("--cloud", help="aws | gcp | azure | lambda (or any cloud of a --catalog-dir)")
    parser.add_argument("--region", help="cloud region, e.g. us-east-1")
    parser.add_argument("--spot", action="store_true", help="price with spot prices (rows without one are left out)")
    parser.add_argument("--catalog-dir", action="append", default=[], metavar="DIR",
                        help="folder with <cloud>/vms.csv (SkyPilot v8) overriding the bundled snapshot; repeatable")
    parser.add_argument("--no-user-catalog", action="store_true",
                        help="ignore ~/.sky/catalogs/v8 even when it exists")
    parser.add_argument("--top", type=int, default=20, metavar="K", help="rows to show (0 = all; default 20)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:g}"


def sorted_offerings(offerings, spot: bool):
    """Priced offerings, cheapest per GPU-hour first (ties: cheaper instance, then cloud/region/zone/name)."""
    priced = [o for o in offerings if o.hourly(spot) is not None]
    return sorted(priced, key=lambda o: (o.usd_per_gpu_hour(spot), o.hourly(spot), o.cloud, o.region,
                                         o.zone or "", o.instance_type))


def run(args: argparse.Namespace) -> int:
    from gpuwise.errors import InputError
    from gpuwise.hardware.catalog import catalog_assumptions, load_catalog

    if args.top < 0:
        raise InputError("--top", args.top, "give 0 (all) or a positive number of rows")
    cat = load_catalog(args.catalog_dir or None, include_user=not args.no_user_catalog)
    matches = cat.filter(gpu=args.gpu, cloud=args.cloud, region=args.region, spot=args.spot)
    if args.gpu and not matches and not cat.filter(gpu=args.gpu):
        raise InputError("gpu", args.gpu, f"no loaded catalog sells it; sold: {', '.join(cat.gpus())}")
    rows = sorted_offerings(matches, args.spot)
    unpriced = len(matches) - len(rows)
    shown = rows[: args.top] if args.top else rows
    mode = "spot" if args.spot else "on-demand"
    clouds = sorted({o.cloud for o in matches}) or cat.clouds()
    dates = {c: cat.dates[c] for c in clouds}
    assumptions = [f"prices are {mode} USD per instance-hour; $/GPU-h = $/h / GPUs per node"]
    assumptions += catalog_assumptions(cat, clouds)
    if unpriced:
        assumptions.append(f"{unpriced} matching rows have no {mode} price and are not listed")
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({
            "offerings": [dict(dataclasses.asdict(o), hourly_usd=o.hourly(args.spot),
                               usd_per_gpu_hour=round(o.usd_per_gpu_hour(args.spot), 6), spot=args.spot)
                          for o in shown],
            "total_matching": len(rows),
            "catalog_dates": dates,
            "skipped": cat.skipped,
            "assumptions": assumptions,
        })
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    date_text = ", ".join(f"{c} {d}" for c, d in dates.items())
    print_table(
        f"{len(shown)} of {len(rows)} {mode} offerings, cheapest per GPU-hour (catalogs: {date_text})",
        ["cloud", "region", "zone", "instance", "GPU", "GPUs", "vCPU/GiB", "$/h", "$/GPU-h"],
        [[o.cloud, o.region, o.zone or "", o.instance_type, o.gpu, f"{o.gpus_per_node:g}",
          f"{_num(o.vcpus)}/{_num(o.memory_gib)}",
          f"{o.hourly(args.spot):.4f}", f"{o.usd_per_gpu_hour(args.spot):.4f}"] for o in shown],
    )
    print_assumptions(assumptions)
    return 0
