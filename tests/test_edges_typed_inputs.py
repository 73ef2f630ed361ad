"""User-supplied workload traces, rent traces and cloud catalogs are validated by typed (pydantic)
rows (gpuwise.user_files): every bad value is one exit-2 line naming the file, row, column, the value
and the fix; names get the closest valid one. Each case below was accepted (or silently dropped)
before the rows were typed, or said less."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and len(err.splitlines()) == 1, err
    return err


# ------------------------------------------------------------------ workload traces (simulate/compare)

@pytest.mark.parametrize("text,needles", [
    ("name,time,application,num_replicas,batch_size\na,nan,cifar10,2,512\n", ["row 1 column time", "finite"]),
    ("name,time,application,num_replicas,batch_size\na,0,cifar10,0,512\n", ["column num_replicas", ">= 1"]),
    ("name,time,num_gpus,application,duration_s\na,0,2,,-5\n", ["column duration_s", "'-5'", "> 0"]),
    ("name,time,num_gpus,duration_s,num_gpu\na,0,2,60,3\n", ["column num_gpu", "did you mean num_gpus"]),
    ("timestamp,duration,num_gpus\n2017-10-03 1x,5,1\n", ["row 1 column timestamp", "YYYY-MM-DD"]),
])
def test_workload_rows_one_line_field_value_fix(tmp_path, capsys, text, needles):
    f = tmp_path / "w.csv"
    f.write_text(text)
    assert main(["simulate", "--workload", str(f), "--policy", "fifo"]) == 2
    line = _one_line(capsys)
    assert str(f) in line and all(n in line for n in needles), line


def test_workload_yaml_gpu_type_suggests_closest(tmp_path, capsys):
    f = tmp_path / "w.yaml"
    f.write_text("jobs:\n  - {name: a, time: 0, num_gpus: 2, duration_s: 60, gpu_type: H10O}\n")
    assert main(["compare", "--workload", str(f), "--policy", "fifo", "--policy", "las"]) == 2
    line = _one_line(capsys)
    assert "row 1 column gpu_type" in line and "'H10O'" in line and "did you mean H100" in line


# ------------------------------------------------------------------ rent traces

RENT = (ROOT / "examples" / "rent" / "fig1.yaml").read_text()


@pytest.mark.parametrize("rows,needles", [
    ("0,a,1\n1,c,2\n", ["row 2 column type", "'c'", "a, b"]),          # was: silently left out of the fit
    ("0,a,1\n3,b,-2\n", ["row 2 column size", "> 0"]),                  # was: silently left out
    ("5,a,1\n3,b,2\n", ["row 2 column arrival_time", "sorted"]),        # was: accepted unsorted
    ("0,a,1\ninf,b,2\n", ["row 2 column arrival_time", "finite"]),
])
def test_rent_trace_rows(tmp_path, capsys, rows, needles):
    (tmp_path / "t.csv").write_text("arrival_time,type,size\n" + rows)
    (tmp_path / "jobs.yaml").write_text(RENT + "trace: t.csv\n")
    assert main(["rent", str(tmp_path / "jobs.yaml"), "--budget", "2"]) == 2
    line = _one_line(capsys)
    assert all(n in line for n in needles), line


def test_rent_trace_replay_refuses_unknown_types(tmp_path):
    import numpy as np

    from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
    from gpuwise.plan.rent.speedup import PowerSpeedup
    from gpuwise.sim.cloud import trace_workload

    types = [JobType(n, 0.4, SizeDistribution(), PowerSpeedup(0.5)) for n in ("single", "multi")]
    f = tmp_path / "t.csv"
    f.write_text("arrival_time,type,size\n0,single,1\n1,mutli,2\n")
    with pytest.raises(InputError, match=r"row 2 column type.*did you mean multi"):
        trace_workload(f, types, np.random.default_rng(0))


# ------------------------------------------------------------------ cloud catalogs (--catalog-dir)

LAMBDA = ROOT / "gpuwise" / "data" / "catalog" / "v8" / "lambda" / "vms.csv"


def _catalog(tmp_path: Path, column: str, value: str) -> Path:
    rows = list(csv.reader(LAMBDA.open()))
    acc = rows[0].index("AcceleratorName")
    gpu_rows = [r for r in rows[1:] if r[acc].strip()][:3]
    gpu_rows[1][rows[0].index(column)] = value
    (tmp_path / "cat" / "lambda").mkdir(parents=True)
    with (tmp_path / "cat" / "lambda" / "vms.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([rows[0], *gpu_rows])
    return tmp_path / "cat"


@pytest.mark.parametrize("column,value,fix", [
    ("Price", "abc", "give a number"),          # was: read as "no price", the row silently unpriced
    ("SpotPrice", "nan", "finite"),             # was: read as "no spot price"
    ("Price", "inf", "finite"),
    ("vCPUs", "0", "> 0"),
    ("AcceleratorCount", "-8", "> 0"),          # was: skipped as "no GPU count"
    ("MemoryGiB", "-1", "> 0"),
])
def test_catalog_rows_one_line(tmp_path, capsys, monkeypatch, column, value, fix):
    monkeypatch.setenv("HOME", str(tmp_path))
    cat = _catalog(tmp_path, column, value)
    assert main(["catalog", "--catalog-dir", str(cat)]) == 2
    line = _one_line(capsys)
    assert f"line 3 column {column}" in line and repr(value) in line and fix in line, line


def test_catalog_misspelt_gpu_is_reported_with_the_closest_name(tmp_path):
    from gpuwise.hardware.catalog import catalog_assumptions, load_catalog

    cat = load_catalog([_catalog(tmp_path, "AcceleratorName", "H10O")], include_user=False)
    assert any("H10O" in a and "did you mean H100" in a for a in catalog_assumptions(cat, ["lambda"]))


def test_cluster_fix_text_is_a_fix(tmp_path, capsys):
    # the cluster and job-spec models share the same strict base and message helper
    f = tmp_path / "c.yaml"
    f.write_text("nodes:\n  - {gpu: A100, count: 2, gpus_per_node: 0}\n")
    assert main(["simulate", "--cluster", str(f), "--workload", str(ROOT / "examples/workloads/small.csv"),
                 "--policy", "fifo"]) == 2
    line = _one_line(capsys)
    assert "nodes[0].gpus_per_node" in line and "give a number >= 1" in line, line
