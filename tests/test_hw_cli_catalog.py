"""`gpuwise catalog` CLI: golden JSON structure and first row, ordering, one-line errors (exit 2).

The expected first row is recomputed from the bundled AWS CSV (cheapest H100 on-demand $/GPU-hour).
"""

import csv
import json
import subprocess
import sys

from gpuwise.data import data_path


def run(*args):
    return subprocess.run([sys.executable, "-m", "gpuwise", "catalog", "--no-user-catalog", *args],
                          capture_output=True, text=True)


def test_catalog_json_golden():
    r = run("--gpu", "H100", "--cloud", "aws", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"offerings", "catalog_dates", "assumptions"}
    assert data["catalog_dates"] == {"aws": "unknown"}
    with open(data_path("catalog", "v8", "aws", "vms.csv"), newline="") as fh:
        h100 = [row for row in csv.DictReader(fh) if row["AcceleratorName"] == "H100"]
    best = min(float(x["Price"]) / float(x["AcceleratorCount"]) for x in h100)
    first = data["offerings"][0]
    assert first["cloud"] == "aws" and first["gpu"] == "H100-80GB-SXM"
    assert first["usd_per_gpu_hour"] == best == 6.88  # p5.4xlarge, 1x H100, $6.88/h
    assert first["instance_type"] == "p5.4xlarge"
    assert {"region", "zone", "gpus_per_node", "vcpus", "memory_gib", "price_usd_per_hour",
            "spot_price_usd_per_hour", "hourly_usd", "catalog_date", "catalog_source"} <= set(first)
    per_gpu = [o["usd_per_gpu_hour"] for o in data["offerings"]]
    assert per_gpu == sorted(per_gpu) and len(per_gpu) == 20  # default --top 20
    assert any("aws prices" in a for a in data["assumptions"])


def test_catalog_spot_sorted_by_spot_price():
    data = json.loads(run("--gpu", "A100-80GB", "--spot", "--top", "0", "--json").stdout)
    offs = data["offerings"]
    assert offs and all(o["spot"] and o["spot_price_usd_per_hour"] is not None for o in offs)
    per_gpu = [o["spot_price_usd_per_hour"] / o["gpus_per_node"] for o in offs]
    assert per_gpu == sorted(per_gpu)
    assert len(offs) == data["total_matching"]


def test_catalog_human_table():
    r = run("--gpu", "L4", "--cloud", "gcp", "--top", "3", "--verbose")
    assert r.returncode == 0, r.stderr
    assert "g2-standard" in r.stdout and "gcp 2026-05-20" in r.stdout.replace("\n", " ")
    assert "Assumptions" in r.stdout and "host VM row" in r.stdout


def test_catalog_bad_input_one_line_exit_2():
    for args, hint in ((["--gpu", "H10"], "H100"), (["--cloud", "gpc"], "gcp"), (["--top", "-1"], "--top"),
                       (["--catalog-dir", "/no/such/dir"], "catalog-dir"), (["--gpu", "MI250X"], "sold")):
        r = run(*args)
        assert r.returncode == 2, args
        assert hint in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
