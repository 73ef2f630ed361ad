"""Price catalog: every bundled SkyPilot v8 file parses, prices match the CSV rows, names resolve.

Expected prices are recomputed in the tests straight from the bundled CSV files with the csv module
(exact to 1e-6 USD), so they check the parser, not a copy of it. GCP: a GPU VM = host row + GPU row of
the same zone (SkyPilot's v8 GCP layout; Google's a2-highgpu-1g list price in us-central1 is $3.67339/h).
"""

import csv
import os
from pathlib import Path

import pytest

from gpuwise.data import data_path
from gpuwise.errors import InputError
from gpuwise.hardware import catalog as catalog_mod
from gpuwise.hardware.catalog import NOT_MAPPED, load_catalog, not_mapped_reason, parse_vms_csv
from gpuwise.hardware.gpus import resolve_gpu_name

CLOUDS = ("aws", "azure", "gcp", "lambda")


def rows(cloud):
    with open(data_path("catalog", "v8", cloud, "vms.csv"), newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def cat():
    return load_catalog(include_user=False)


def test_every_bundled_cloud_parses(cat):
    assert sorted(cat.dates) == list(CLOUDS)
    assert cat.dates["gcp"] == cat.dates["azure"] == cat.dates["lambda"] == "2026-05-20"
    by_cloud = {c: [o for o in cat.offerings if o.cloud == c] for c in CLOUDS}
    # AWS subset: 616 GPU rows, every one resolves (README/PROVENANCE: "616 AWS GPU rows").
    assert len(by_cloud["aws"]) == len(rows("aws")) == 616
    # Lambda: every accelerator row is a whole-GPU offering.
    assert len(by_cloud["lambda"]) == sum(1 for r in rows("lambda") if r["AcceleratorName"]) == 391
    # Azure: accelerator rows minus the fractional vGPU slices (A10 v5 < 1 GPU, NVv4 MI25 slices).
    az = [r for r in rows("azure") if r["AcceleratorName"]]
    frac = [r for r in az if float(r["AcceleratorCount"]) < 1 or r["InstanceType"] in
            ("Standard_NV4as_v4", "Standard_NV8as_v4", "Standard_NV16as_v4")]
    assert len(by_cloud["azure"]) == len(az) - len(frac) == 652
    assert len(by_cloud["gcp"]) > 800
    for o in cat.offerings:
        assert o.gpus_per_node >= 1 and o.region and o.instance_type
        assert o.price_usd_per_hour is None or o.price_usd_per_hour > 0


def test_gcp_a100_vm_is_host_plus_gpu(cat):
    r = rows("gcp")
    host = next(x for x in r if x["InstanceType"] == "a2-highgpu-1g" and x["AvailabilityZone"] == "us-central1-a")
    gpu = next(x for x in r if not x["InstanceType"] and x["AcceleratorName"] == "A100"
               and x["AcceleratorCount"] == "1" and x["AvailabilityZone"] == "us-central1-a")
    o = next(o for o in cat.offerings if o.cloud == "gcp" and o.instance_type == "a2-highgpu-1g"
             and o.zone == "us-central1-a")
    assert o.gpu == "A100-40GB-SXM" and o.gpus_per_node == 1
    assert o.price_usd_per_hour == pytest.approx(float(host["Price"]) + float(gpu["Price"]), abs=1e-6)
    assert o.price_usd_per_hour == pytest.approx(3.67339, abs=1e-5)
    assert o.spot_price_usd_per_hour == pytest.approx(float(host["SpotPrice"]) + float(gpu["SpotPrice"]), abs=1e-6)
    assert (o.vcpus, o.memory_gib) == (float(host["vCPUs"]), float(host["MemoryGiB"]))


def test_gcp_attached_gpus_on_n1_host(cat):
    r = rows("gcp")
    host = next(x for x in r if x["InstanceType"] == "n1-highmem-8" and x["AvailabilityZone"] == "us-central1-a")
    gpu = next(x for x in r if not x["InstanceType"] and x["AcceleratorName"] == "V100"
               and x["AcceleratorCount"] == "4" and x["AvailabilityZone"] == "us-central1-a")
    o = next(o for o in cat.offerings if o.cloud == "gcp" and o.gpu == "V100-16GB-SXM2" and o.gpus_per_node == 4
             and o.zone == "us-central1-a")
    assert o.instance_type == "n1-highmem-8"
    assert o.price_usd_per_hour == pytest.approx(float(host["Price"]) + float(gpu["Price"]), abs=1e-6)


def test_gcp_h100_in_edge_only_zone_uses_a3_edgegpu(cat):
    offers = [o for o in cat.offerings if o.cloud == "gcp" and o.zone == "europe-west2-b" and o.gpu == "H100-80GB-SXM"]
    assert [o.instance_type for o in offers] == ["a3-edgegpu-8g"]


@pytest.mark.parametrize("cloud,instance,region,price", [
    ("aws", "p4d.24xlarge", "us-east-1", None), ("aws", "g5.xlarge", "us-east-1", None),
    ("lambda", "gpu_8x_h100_sxm5", "us-east-1", None), ("azure", "Standard_ND96asr_v4", "eastus", None),
])
def test_generic_rows_match_csv(cat, cloud, instance, region, price):
    src = [r for r in rows(cloud) if r["InstanceType"] == instance and r["Region"] == region]
    assert src, "fixture row must exist in the bundled CSV"
    got = [o for o in cat.offerings if o.cloud == cloud and o.instance_type == instance and o.region == region]
    assert len(got) == len(src)
    assert sorted(o.price_usd_per_hour for o in got) == sorted(float(r["Price"]) for r in src)
    spot = sorted((float(r["SpotPrice"]) if r.get("SpotPrice") else None) or 0 for r in src)
    assert sorted(o.spot_price_usd_per_hour or 0 for o in got) == spot


def test_every_catalog_accelerator_resolves_or_is_listed_as_not_mapped():
    # Deliberately not mapped: TPUs (not GPUs). Everything else in the four bundled files resolves.
    deliberately_unmapped = set()
    for cloud in CLOUDS:
        for name in {r["AcceleratorName"] for r in rows(cloud) if r["AcceleratorName"]}:
            if resolve_gpu_name(name) is None:
                assert not_mapped_reason(name), f"{cloud} accelerator {name!r} neither resolves nor is listed"
                deliberately_unmapped.add(name.split("-")[0])
    assert deliberately_unmapped == {"tpu"}
    # Names from full SkyPilot catalogs that are not GPUs are listed too.
    for name in ("Inferentia", "Inferentia2", "Trainium", "Gaudi HL-205", "Radeon Pro V520", "tpu-v4-8"):
        assert not_mapped_reason(name)
    assert len(NOT_MAPPED) >= 5


@pytest.mark.parametrize("cloud,instance,gpu", [
    ("aws", "p4de.24xlarge", "A100-80GB-SXM"), ("aws", "p5.48xlarge", "H100-80GB-SXM"),
    ("aws", "g5.xlarge", "A10G"), ("aws", "p3dn.24xlarge", "V100-32GB-SXM2"),
    ("azure", "Standard_NC24ads_A100_v4", "A100-80GB-PCIE"), ("azure", "Standard_ND96amsr_A100_v4", "A100-80GB-SXM"),
    ("azure", "Standard_NC40ads_H100_v5", "H100-NVL"), ("azure", "Standard_ND96isr_H100_v5", "H100-80GB-SXM"),
    ("azure", "Standard_NC6s_v3", "V100-16GB-PCIE"), ("lambda", "gpu_1x_h100_pcie", "H100-80GB-PCIE"),
    ("lambda", "gpu_1x_a100_sxm4", "A100-40GB-SXM"), ("lambda", "gpu_1x_a100", "A100-40GB-PCIE"),
    ("lambda", "gpu_8x_a100", "A100-40GB-SXM"), ("lambda", "gpu_1x_rtx6000", "Quadro-RTX-6000"),
    ("gcp", "a3-megagpu-8g", "H100-80GB-SXM"), ("gcp", "g2-standard-4", "L4"),
])
def test_instance_families_resolve_to_the_right_part(cat, cloud, instance, gpu):
    got = {o.gpu for o in cat.offerings if o.cloud == cloud and o.instance_type == instance}
    assert got == {gpu}


def test_fractional_rows_are_counted_not_dropped_silently(cat):
    assert cat.skipped["azure A10: fractional GPU (vGPU slice), not plannable for training"] == 108
    assert cat.skipped["gcp Google TPU, not a GPU"] > 1000


def test_filter(cat):
    h100 = cat.filter(gpu="H100", cloud="aws")
    assert h100 and all(o.gpu == "H100-80GB-SXM" and o.cloud == "aws" for o in h100)
    spot = cat.filter(spot=True)
    assert spot and all(o.spot_price_usd_per_hour is not None for o in spot)
    assert not any(o.cloud == "lambda" for o in spot)  # Lambda sells no spot
    assert all(o.region == "us-east-1" for o in cat.filter(cloud="aws", region="us-east-1"))
    assert cat.filter(gpu="MI250X") == []  # known GPU, sold by no bundled cloud


@pytest.mark.parametrize("kwargs,field,hint", [
    ({"gpu": "H10"}, "gpu", "H100"), ({"cloud": "gpc"}, "cloud", "gcp"),
    ({"cloud": "aws", "region": "us-east-9"}, "region", "us-east-1"),
])
def test_unknown_names_suggest(cat, kwargs, field, hint):
    with pytest.raises(InputError) as exc:
        cat.filter(**kwargs)
    assert exc.value.field == field and hint in str(exc.value)


def _write(path: Path, header: str, lines: list[str]):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *lines]) + "\n")


LAMBDA_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice"


def test_user_dir_overrides_bundled_cloud(tmp_path):
    _write(tmp_path / "lambda" / "vms.csv", LAMBDA_HEADER,
           ["gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,2.49,us-east-1,,", "cpu_4x,,,4.0,16.0,0.2,us-east-1,,"])
    os.utime(tmp_path / "lambda" / "vms.csv", (1_700_000_000, 1_700_000_000))  # 2023-11-14 UTC
    cat = load_catalog([tmp_path], include_user=False)
    lam = [o for o in cat.offerings if o.cloud == "lambda"]
    assert len(lam) == 1 and lam[0].price_usd_per_hour == 2.49 and lam[0].gpu == "H100-80GB-SXM"
    assert cat.dates["lambda"] == "2023-11-14" and cat.dates["gcp"] == "2026-05-20"
    assert any(o.cloud == "aws" for o in cat.offerings)  # other clouds still bundled


def test_user_files_named_cloud_vms_csv_and_new_clouds(tmp_path):
    _write(tmp_path / "runpod_vms.csv", LAMBDA_HEADER, ["1x_A100-80GB,A100-80GB,1,16,125,1.64,US,,1.19"])
    cat = load_catalog([tmp_path], include_user=False)
    (o,) = cat.filter(cloud="runpod")
    assert o.gpu == "A100-80GB-SXM" and o.spot_price_usd_per_hour == 1.19 and o.zone is None


def test_sky_cache_is_read_when_present(tmp_path, monkeypatch):
    _write(tmp_path / "lambda" / "vms.csv", LAMBDA_HEADER, ["gpu_1x_a10,A10,1.0,30.0,200.0,0.5,us-west-1,,"])
    monkeypatch.setattr(catalog_mod, "USER_CATALOG_DIR", tmp_path)
    cat = load_catalog()
    assert [o.price_usd_per_hour for o in cat.offerings if o.cloud == "lambda"] == [0.5]
    assert sum(o.cloud == "lambda" for o in load_catalog(include_user=False).offerings) == 391


def test_bad_catalog_inputs(tmp_path):
    _write(tmp_path / "aws" / "vms.csv", "InstanceType,Price", ["x,1"])
    with pytest.raises(InputError, match="missing column"):
        load_catalog([tmp_path], include_user=False)
    with pytest.raises(InputError) as exc:
        load_catalog([tmp_path / "nope"], include_user=False)
    assert exc.value.field == "catalog-dir"


def test_bundled_load_is_cached(cat):
    # the second call returns the cached object (load speed is measured in benchmarks/hw_catalog_load.py)
    assert load_catalog(include_user=False) is cat


def test_parse_single_file_directly():
    offers = parse_vms_csv("lambda", data_path("catalog", "v8", "lambda", "vms.csv"), "2026-05-20")
    assert len(offers) == 391


def test_cpu_instances_on_request(cat):
    gcp = cat.cpu_instances("gcp")
    assert gcp and all(o.gpu == "" and o.gpus_per_node == 0 for o in gcp)
    assert not any(o.instance_type.startswith(("a2-", "a3-", "a4-", "g2-")) for o in gcp)  # GPU-only hosts
    n1 = next(o for o in gcp if o.instance_type == "n1-highmem-8" and o.zone == "us-central1-a")
    src = next(r for r in rows("gcp") if r["InstanceType"] == "n1-highmem-8" and r["AvailabilityZone"] == "us-central1-a")
    assert n1.price_usd_per_hour == float(src["Price"]) and n1.usd_per_gpu_hour() is None
    assert len(cat.cpu_instances("azure")) == sum(1 for r in rows("azure") if not r["AcceleratorName"])
    assert cat.cpu_instances("aws") == []  # the bundled AWS file is a GPU-only subset
    with pytest.raises(InputError):
        cat.cpu_instances("gpc")


def test_shared_style_file_names(tmp_path):
    # ../shared/data/skypilot-catalog layout: gcp_vms.csv, aws_gpu_vms_subset.csv (copied from the bundle here)
    (tmp_path / "aws_gpu_vms_subset.csv").write_bytes(data_path("catalog", "v8", "aws", "vms.csv").read_bytes())
    cat = load_catalog([tmp_path], include_user=False)
    assert cat.sources["aws"].endswith("aws_gpu_vms_subset.csv")
    assert sum(o.cloud == "aws" for o in cat.offerings) == 616
    cat2 = load_catalog([tmp_path / "aws_gpu_vms_subset.csv"], include_user=False)
    assert cat2.sources["aws"] == cat.sources["aws"]


def test_unreadable_sky_cache_file_falls_back(tmp_path, monkeypatch):
    _write(tmp_path / "gcp" / "vms.csv", "Name,Whatever", ["x,1"])  # not a v8 vms.csv
    _write(tmp_path / "kubernetes" / "vms.csv", "Name,Whatever", ["x,1"])
    monkeypatch.setattr(catalog_mod, "USER_CATALOG_DIR", tmp_path)
    cat = load_catalog()
    assert cat.sources["gcp"].startswith("anycloud-sh") and "kubernetes" not in cat.dates
    assert any("unreadable file in the SkyPilot cache" in k for k in cat.skipped)


def _both_ways(monkeypatch, cloud, path):
    """parse_vms_csv's (offerings, skipped) or its error text, with the regex row finder and with the csv module."""
    out = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(catalog_mod, "_plain_rows", lambda *a: None)
            skipped: dict = {}
            try:
                out.append((parse_vms_csv(cloud, path, "2026-05-20", skipped), skipped))
            except InputError as exc:
                out.append(str(exc))
    return out


@pytest.mark.parametrize("cloud", CLOUDS)
def test_rows_found_by_regex_are_those_csv_reads(monkeypatch, cloud):
    """Unquoted files are searched with a regex for the rows a parser keeps (catalog._plain_rows): the same
    offerings and skipped rows as reading every row with the csv module."""
    path = data_path("catalog", "v8", cloud, "vms.csv")
    fast, slow = _both_ways(monkeypatch, cloud, path)
    assert fast == slow and fast[0]
    raw = path.read_bytes()   # quoted (Lambda) or CRLF (AWS) files take the csv path, Azure and GCP the regex
    assert (catalog_mod._plain_rows(path, 1, "\n") is None) == (b'"' in raw or b"\r" in raw)


@pytest.mark.parametrize("lines, line", [
    (["", "cpu_4x,,,4.0,16.0,0.2,us-east-1,,", "gpu_1x_h100_sxm5,H100,1.0,26.0,225.0,-2.49,us-east-1,,"], 4),
    (["gpu_1x_a10,A10,1.0,30.0,200.0,0.5,us-west-1", "x,H100,1.0,26.0,225.0,2.49,,,"], 3),
    (["gpu_1x_a10,A10,1.0,30.0,200.0,0.5,us-west-1,,", "", "", "x,H100,1.0,26.0,225.0,nan,us-east-1,,"], 5),
    (['"gpu_1x_a10",A10,1.0,30.0,200.0,0.5,us-west-1,,', "x,H100,1.0,26.0,225.0,oops,us-east-1,,"], 3),
])
def test_bad_rows_are_named_by_the_same_line_either_way(tmp_path, monkeypatch, lines, line):
    """Short rows and blank lines count as rows to both readers, so a bad cell's line number is the same."""
    _write(tmp_path / "lambda" / "vms.csv", LAMBDA_HEADER, lines)
    fast, slow = _both_ways(monkeypatch, "lambda", tmp_path / "lambda" / "vms.csv")
    assert fast == slow and f"line {line}" in fast


@pytest.mark.parametrize("cells, column", [("x,H100,true,26.0,225.0,2.49,us-east-1,,", "AcceleratorCount"),
                                           ("x,H100,1.0,26.0,225.0,inf,us-east-1,,", "Price"),
                                           ("x,H100,1.0,26.0,225.0,-1,us-east-1,,", "Price")])
def test_catalog_rows_checked_without_the_bool_validator(tmp_path, cells, column):
    """A catalog row's model (text cells only, strict_base(text_cells=True)) still refuses text that is not a
    valid number, infinities and negative prices, naming the line and the column; the strict base of other
    files still refuses a YAML true as a number."""
    from pydantic import ValidationError

    from gpuwise.user_files import strict_base

    _write(tmp_path / "lambda" / "vms.csv", LAMBDA_HEADER, [cells])
    with pytest.raises(InputError) as exc:
        load_catalog([tmp_path], include_user=False)
    assert "line 2" in str(exc.value) and column in str(exc.value)
    assert strict_base() is strict_base(False) and strict_base(text_cells=True) is not strict_base()

    class Row(strict_base()):
        n: float

    with pytest.raises(ValidationError, match="true/false"):
        Row.model_validate({"n": True})


def test_fast_offering_is_the_dataclass():
    """The catalog's fast Offering constructor gives the dataclass's object (equal, same hash, fields, pickle),
    still frozen; wrong fields still raise the __init__'s TypeError."""
    import dataclasses
    import pickle

    from gpuwise.hardware.types import Offering

    fields = dict(cloud="gcp", region="europe-north1", zone="europe-north1-a", instance_type="a3-highgpu-8g",
                  gpu="H100-80GB-SXM", gpus_per_node=8.0, vcpus=208.0, memory_gib=1872.0, price_usd_per_hour=88.2,
                  spot_price_usd_per_hour=9.4, catalog_date="2026-05-20", catalog_source="bundled")
    fast, slow = catalog_mod._offering(**fields), Offering(**fields)
    assert type(fast) is Offering and fast == slow and hash(fast) == hash(slow)
    assert list(fast.__dict__.items()) == list(slow.__dict__.items()) and pickle.dumps(fast) == pickle.dumps(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.gpu = "A100"
    with pytest.raises(TypeError):
        catalog_mod._offering(**{**fields, "gpus": 8})
