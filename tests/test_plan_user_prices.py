"""Prices a user gives `plan` (--price, --offerings), the spot outlier floor, and the catalog's age."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.hardware.catalog import catalog_age, load_catalog
from gpuwise.hardware.types import Offering
from gpuwise.plan.offerings import region_offerings, spot_floors, spot_outliers

PRETRAIN = Path(__file__).resolve().parents[1] / "examples" / "llama-3.1-8b-pretrain.yaml"
SMALL = ["--gpu", "H100", "--max-gpus", "16", "--json"]   # a quick search


def _off(region: str, price: float, spot: float | None, source: str = "cat.csv") -> Offering:
    return Offering("aws", region, None, "x8", "H100-80GB-SXM", 8.0, None, None, price * 8,
                    spot * 8 if spot else None, "2026-01-01", source)


def test_floor_flags_only_the_far_outlier():
    # spot/on-demand ratios 0.30-0.40 in nine regions, one at 0.05: the 10th percentile ratio is ~0.29,
    # so the floor is ~0.145 x $4 = $0.58/GPU-h
    offs = [_off(f"r{i}", 4.0, 1.2 + 0.05 * i) for i in range(9)] + [_off("cheap", 4.0, 0.2)]
    regions = region_offerings(offs)
    floors = spot_floors(regions)
    f = floors["H100-80GB-SXM"]
    assert f.od_median == 4.0 and f.offers == 10 and 0.4 < f.floor_usd < 0.7
    flagged = {o.region for o, bad in zip(regions, spot_outliers(regions, floors)) if bad}
    assert flagged == {"cheap"}
    # a price the user gives is never judged, and too few offerings are not judged at all
    mine = region_offerings([_off("mine", 4.0, 0.2, "user:my.yaml")])
    assert not spot_outliers(mine, floors).any()
    assert spot_floors(region_offerings(offs[:4])) == {}


def test_catalog_age_and_the_unknown_aws_date():
    cat = load_catalog(include_user=False)
    assert catalog_age(cat, "gcp", dt.date(2026, 5, 30)) == "catalog dated 2026-05-20, 10 days old"
    aws = catalog_age(cat, "aws")
    assert aws.startswith("catalog date unknown (") and "00148f2a" in aws and "p6-b300" in aws


def _plan_json(capsys, *args) -> dict:
    assert main(["plan", str(PRETRAIN), *SMALL, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_price_flag_sets_every_on_demand_price_of_the_gpu(capsys):
    d = _plan_json(capsys, "--price", "H100=1.25", "--no-spot", "--top", "40")
    assert {c["usd_per_gpu_hour"] for c in d["candidates"]} == {1.25}
    assert any(a.startswith("your price: H100-80GB-SXM on demand $1.25/GPU-h") for a in d["assumptions"])


def test_offerings_file_is_planned_on(tmp_path, capsys):
    f = tmp_path / "mine.csv"
    f.write_text("gpu,gpus_per_node,price,name,region\nH100,8,0.5,onprem,dc1\n")
    d = _plan_json(capsys, "--offerings", str(f))
    ch = d["chosen"]
    assert (ch["cloud"], ch["region"], ch["instance_type"], ch["usd_per_gpu_hour"]) == ("user", "dc1", "onprem", 0.5)


def test_own_offerings_survive_the_specs_cloud_constraint(tmp_path, capsys):
    """A review found `--cloud aws` (like a spec's constraints.clouds) silently dropping the user's own
    --offerings rows while the assumptions still named them: they are what the user asked to plan on."""
    f = tmp_path / "mine.csv"
    f.write_text("gpu,gpus_per_node,price,name,region\nH100,8,0.5,onprem,dc1\n")
    d = _plan_json(capsys, "--offerings", str(f), "--cloud", "aws")
    assert (d["chosen"]["cloud"], d["chosen"]["instance_type"]) == ("user", "onprem")


@pytest.mark.parametrize("args,needle", [
    (["--price", "H100"], "--price: 'H100' is invalid; write GPU=USD"),
    (["--price", "H100=-3"], "give a price above 0"),
    (["--price", "H1000=2"], "did you mean H100"),
    (["--offerings", "missing.yaml"], "--offerings: 'missing.yaml' is invalid; file not found"),
])
def test_bad_prices_are_one_line_exit_2(args, needle, capsys):
    assert main(["plan", str(PRETRAIN), *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_bad_offerings_rows_name_the_row_and_column(tmp_path, capsys):
    f = tmp_path / "o.yaml"
    f.write_text("- {gpu: H100, gpus_per_node: 8, price: 2}\n- {gpu: H100, gpus_per_node: 8, prize: 2}\n")
    assert main(["plan", str(PRETRAIN), "--offerings", str(f)]) == 2
    err = capsys.readouterr().err
    assert "row 2 column prize" in err and "did you mean price" in err and err.count("\n") == 1
