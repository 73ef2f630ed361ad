"""Prices a user gives `plan`: `--price GPU=USD` and a small offerings file (`--offerings FILE`).

- ``--price H100=2.10`` (repeatable): USD per GPU-hour on demand for that GPU type, on every catalog
  offering of it (a negotiated or committed price); the catalog's spot prices of it stay as they are.
- ``--offerings FILE`` (.yaml/.yml: a list of mappings, or .csv with a header): one offering per row with
  ``gpu``, ``gpus_per_node``, ``price`` (USD per GPU-hour on demand) and optionally ``spot_price`` (USD per
  GPU-hour), ``name`` (instance type), ``cloud`` (default ``user``), ``region`` (default ``user``). The rows
  are added to the catalog; a row of a catalog cloud is planned like that cloud's rows.

Both give a new Catalog whose `market` keeps the catalog's own rows, from which the spot outlier floors
are computed (`gpuwise.plan.offerings`): a price the user gives never moves them, and is never flagged.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from pathlib import Path

from gpuwise.errors import InputError
from gpuwise.hardware.types import Offering

USER_CLOUD = "user"
USER_SOURCE = "user:"   # catalog_source prefix of rows from an offerings file (plan.offerings.is_user_priced)


def parse_price(text: str) -> tuple[str, float]:
    """'H100=2.10' -> (canonical GPU name, USD per GPU-hour); errors name --price and the fix."""
    from gpuwise.hardware.gpus import get_gpu

    name, sep, value = str(text).partition("=")
    if not sep or not name.strip():
        raise InputError("--price", text, "write GPU=USD per GPU-hour, e.g. --price H100=2.10")
    try:
        usd = float(value)
    except ValueError:
        raise InputError("--price", text, "the price after '=' must be a number (USD per GPU-hour), "
                                          "e.g. --price H100=2.10") from None
    if not (usd > 0 and usd < 1e4):   # also refuses NaN
        raise InputError("--price", text, "give a price above 0 and below 10000 USD per GPU-hour")
    return get_gpu(name.strip(), "--price").name, usd


def _price_rows(offerings: list[Offering], prices: dict[str, float]) -> list[Offering]:
    return [replace(o, price_usd_per_hour=round(prices[o.gpu] * o.gpus_per_node, 6)) if o.gpu in prices else o
            for o in offerings]


def _offering_model() -> type:
    from typing import Optional

    from pydantic import Field, field_validator

    from gpuwise.user_files import strict_base, whole_number

    class UserOffering(strict_base()):
        gpu: str = Field(min_length=1)
        gpus_per_node: int = Field(ge=1, le=64, description="GPUs per node")
        price: float = Field(gt=0, lt=1e4, description="USD per GPU-hour on demand")
        spot_price: Optional[float] = Field(None, gt=0, lt=1e4, description="USD per GPU-hour on spot")
        name: Optional[str] = Field(None, min_length=1, max_length=100)
        cloud: str = Field(USER_CLOUD, min_length=1, max_length=40, pattern=r"^[a-z0-9_-]+$")
        region: str = Field(USER_CLOUD, min_length=1, max_length=60)

        _whole = field_validator("gpus_per_node", mode="before")(lambda cls, v: whole_number(v))

    return UserOffering


def _raw_rows(path: str) -> list[dict]:
    from gpuwise.user_files import load_yaml, read_text

    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        import csv
        import io

        return list(csv.DictReader(io.StringIO(read_text(path, "--offerings", "offerings CSV"))))
    if suffix not in (".yaml", ".yml"):
        raise InputError("--offerings", path, "give a .yaml, .yml or .csv file")
    data = load_yaml(path, "--offerings", "offerings YAML")
    data = data.get("offerings") if isinstance(data, dict) else data
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError("--offerings", path, "the YAML must be a list of offerings (gpu, gpus_per_node, price, ...)")
    return data


def load_offerings(path: str) -> list[Offering]:
    """The offerings of a user's file, validated (errors name the file, row and column)."""
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.user_files import validate_row

    rows = _raw_rows(path)
    if not rows:
        raise InputError("--offerings", path, "holds no offerings; give rows of gpu, gpus_per_node, price")
    if len(rows) > 10000:
        raise InputError("--offerings", path, f"holds {len(rows)} rows; give at most 10000")
    model, date = _offering_model(), _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    out = []
    for i, raw in enumerate(rows, start=1):
        r = validate_row(model, raw, f"--offerings {path} row {i}")
        gpu = get_gpu(r.gpu, f"--offerings {path} row {i} gpu").name
        n = r.gpus_per_node
        out.append(Offering(cloud=r.cloud, region=r.region, zone=None, instance_type=r.name or f"{gpu} x{n}",
                            gpu=gpu, gpus_per_node=float(n), vcpus=None, memory_gib=None,
                            price_usd_per_hour=round(r.price * n, 6),
                            spot_price_usd_per_hour=round(r.spot_price * n, 6) if r.spot_price else None,
                            catalog_date=date, catalog_source=f"{USER_SOURCE}{path}"))
    return out


def with_user_prices(catalog, prices: list[str] | None = None, offerings: str | None = None):
    """`catalog` with the user's prices applied (the same object when none are given)."""
    if not prices and not offerings:
        return catalog
    from dataclasses import replace as dc_replace

    rows, notes = list(catalog.offerings), list(catalog.notes)
    dates, sources = dict(catalog.dates), dict(catalog.sources)
    if prices:
        given = dict(parse_price(p) for p in prices)
        missing = sorted(set(given) - {o.gpu for o in rows})
        if missing:
            raise InputError("--price", missing[0], "no catalog offering of this GPU to price; give it in an "
                                                    "--offerings file (gpu, gpus_per_node, price)")
        rows = _price_rows(rows, given)
        notes += [f"your price: {g} on demand ${usd:.2f}/GPU-h on every offering of it (--price); its spot "
                  "prices are the catalog's (add --no-spot to plan on your price alone)" for g, usd in given.items()]
    extra: list = []
    if offerings:
        extra = load_offerings(offerings)
        rows += extra
        for o in extra:
            dates.setdefault(o.cloud, o.catalog_date)
            sources.setdefault(o.cloud, f"--offerings {offerings}")
        notes.append(f"your prices: {len(extra)} offering{'s' if len(extra) != 1 else ''} from --offerings "
                     f"{offerings} (USD per GPU-hour as given; never flagged as outliers)")
    return dc_replace(catalog, offerings=rows, dates=dates, sources=sources, notes=notes,
                      market=catalog.market if catalog.market is not None else list(catalog.offerings),
                      user_offerings=catalog.user_offerings | frozenset(extra))
