"""The model against real training steps measured on an H200 (gpuwise/data/measured/gpu/): the bundled rows
load, each configuration once (a resumed run's re-measured rows win), and the memory model stays where
those measurements put it. These are measurements of real PyTorch steps, independent of the formulas."""

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.validation.gpu_runs import SETS, compare, measured_rows, summary


@pytest.fixture(scope="module")
def rows():
    return {s: compare(s) for s in SETS}


def test_each_configuration_counts_once_and_every_row_ran_on_the_gpu(rows):
    grid = measured_rows(SETS["grid"])
    keys = {(r["model"], r["micro_batch"], r["seq_len"], r["precision"], r["recompute"], r["lora_rank"], r["quantize"], r["levers"])
            for r in grid}
    assert len(keys) == len(grid) == 28 and len(rows["check"]) == 13
    assert all(r.device == "NVIDIA H200" for s in rows.values() for r in s)


def test_allocated_memory_holds_on_both_sets(rows):
    for s, got in rows.items():
        a = summary(got, "allocated", skip_caveats=True)
        assert a["median_abs_error"] <= 0.02, s
        assert a["most_optimistic"] >= -0.10, s         # no row under-predicted by more than 10%


def test_every_lever_row_names_its_caveat_when_the_harness_differs(rows):
    offload = [r for s in rows.values() for r in s if "activation_offload" in r.entry[7]]
    assert offload and all("save_on_cpu" in r.caveat for r in offload)
    assert all(not r.caveat for s in rows.values() for r in s if not r.entry[7] and r.entry[6] is None)


def test_cli_reports_both_sets(capsys):
    assert main(["validate", "gpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t["set"] for t in out["summary"]} == {"grid", "check"} and len(out["rows"]) == 41
    assert any("held out" in a for a in out["assumptions"])
