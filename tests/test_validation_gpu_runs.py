"""The model against real training steps measured on an H200 (gpuwise/data/measured/gpu/): the bundled rows
load, each configuration once (a resumed run's re-measured rows win), and the memory model stays where
those measurements put it. These are measurements of real PyTorch steps, independent of the formulas."""

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.validation.gpu_runs import SETS, compare, measured_rows, summary


@pytest.fixture(scope="module")
def rows():
    return {s: got for s in SETS if (got := compare(s))}        # the measured sets (varying: none yet)


def test_each_configuration_counts_once_and_every_row_ran_on_the_gpu(rows):
    grid = measured_rows(SETS["grid"])
    keys = {(r["model"], r["micro_batch"], r["seq_len"], r["precision"], r["recompute"], r["lora_rank"], r["quantize"], r["levers"])
            for r in grid}
    assert len(keys) == len(grid) == 28 and len(rows["check"]) == 13
    assert all(r.device == "NVIDIA H200" for s in rows.values() for r in s)


def test_allocated_memory_holds_on_both_sets(rows):
    assert {"grid", "check"} <= set(rows)
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


def _step_s(r, measured: bool) -> float:
    tokens = r.entry[1] * r.entry[2]                  # one micro-step per optimizer step in the harness
    return tokens / (r.measured_tokens_per_s if measured else r.predicted_tokens_per_s)


def test_foreach_adamw_step_costs_what_the_grid_pair_measured(rows):
    """gemma-2b mb2 full recompute, measured with foreach and with fused AdamW (grid, in-sample): the unfused
    update's extra HBM passes (roofline_step.UNFUSED_ADAM_EXTRA_BYTES, counted from torch.optim.adam) account
    for the measured gap (39.7 ms); before they were timed, the model predicted no gap at all."""
    pair = {r.entry[7]: r for r in rows["grid"] if r.entry[:7] == ("gemma-2b", 2, 2048, "bf16-mixed", "full", 0, None)
            and r.entry[7] in ("", "optimizer_impl=fused")}
    foreach, fused = pair[""], pair["optimizer_impl=fused"]
    measured = _step_s(foreach, True) - _step_s(fused, True)
    predicted = _step_s(foreach, False) - _step_s(fused, False)
    assert measured == pytest.approx(0.0397, abs=0.001)
    assert 0.65 * measured <= predicted <= 1.2 * measured


def test_step_time_on_the_grid_errs_slow_except_the_launch_bound_gpt2(rows):
    """Regression guard on the H200 grid (in-sample: looked at while the optimizer term was added; nothing fitted
    on it): today's model is slow on single-GPU H200 (GEMM / flash-attention efficiency of the Hopper pytorch row,
    fitted on multi-node FSDP runs). Median |error| 23.8%; the only over-prediction beyond 5% is gpt2 at mb8
    (+55%: short kernels, host/launch bound)."""
    t = summary(rows["grid"], "tokens_per_s", skip_caveats=True)
    assert t["median_abs_error"] <= 0.26 and t["most_optimistic"] <= 0.60
    others = [r.errors["tokens_per_s"] for r in rows["grid"] if not r.caveat and r.model != "gpt2"]
    assert len(others) == 25 and max(others) <= 0.05 and min(others) >= -0.50


def test_runtime_rows_are_repredicted_by_todays_model():
    """The runtime's H200 steps of its built-in models against today's goodput object: tiny-llama's 2-layer step is
    host-bound (the recorded 0.72 ms ignored the host; today's floor says ~8 ms against 17.6 ms measured)."""
    from gpuwise.validation.gpu_runs import runtime_rows

    rows = {r.model: r for r in runtime_rows()}
    llama = rows["tiny-llama"]
    assert llama.recorded_step_s < 0.001 < llama.today_step_s < llama.measured_step_s
    assert -0.7 < llama.error < 0
    assert rows["tiny-resnet"].today_step_s is not None
    assert "script-smoke" not in [r.job for r in runtime_rows()]      # a user script has no model to predict


def test_simulated_allocator_reserve_matches_the_measured_gpt2_row(rows):
    """gpt2 mb8 seq1024 (grid): its traced allocations replayed through PyTorch's caching-allocator rules reserve
    within 2% of the H200's measured max_memory_reserved (10.44 GiB), with nothing fitted on the row; the fitted
    slack fraction misses it by more (in-sample even so)."""
    from gpuwise.validation.gpu_runs import SIMULATED, simulate_row

    row = next(r for r in rows["grid"] if r.entry == ("gpt2", 8, 1024, "bf16-mixed", "none", 0, None, ""))
    sim = simulate_row(row)
    assert sim.simulated_reserved_gib is not None and "steady" in sim.simulation_note
    assert abs(sim.errors[SIMULATED]) <= 0.02
    assert abs(sim.errors[SIMULATED]) < abs(sim.errors["reserved"])


def test_rows_the_trace_refuses_say_why_instead_of_a_number(rows):
    from gpuwise.validation.gpu_runs import SIMULATED, simulate_row

    row = next(r for r in rows["grid"] if r.entry[7] == "compile=1")
    sim = simulate_row(row)
    assert sim.simulated_reserved_gib is None and sim.errors[SIMULATED] is None
    assert sim.simulation_note.startswith("not simulated:") and "--compile" in sim.simulation_note


def test_cli_json_carries_the_simulated_reserve_only_when_asked(capsys):
    assert main(["validate", "gpu", "--simulate-allocator", "--model", "gpt2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["rows"]
    assert out["simulated_allocator"] and row["simulated_reserved_gib"] == pytest.approx(10.44, rel=0.02)
    sim = [t for t in out["summary"] if t["quantity"] == "reserved_simulated"]
    assert {t["sample"] for t in sim} == {"nothing fitted (looked at while written)"}
    assert next(t for t in sim if t["set"] == "grid")["rows"] == 1
    fitted = next(t for t in out["summary"] if t["quantity"] == "reserved_on_simulated_rows" and t["set"] == "grid")
    assert fitted["sample"].startswith("in-sample") and fitted["median_abs_error"] > sim[0]["median_abs_error"]
    assert main(["validate", "gpu", "--model", "gpt2"]) == 0           # without the flag: not run, but offered
    text = capsys.readouterr().out
    assert "add --simulate-allocator" in text and "simulated GiB" not in text
    assert main(["validate", "gpu", "--model", "no-such-model"]) == 2
    assert "gpt2" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["validate", "memory", "--model", "gpt2"],
                                  ["validate", "throughput", "--simulate-allocator"],
                                  ["validate", "memory", "--against", "trace", "--simulate-allocator"]])
def test_validate_refuses_flags_its_target_would_ignore(argv, capsys):
    from gpuwise.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("model" in err[0] or "simulate-allocator" in err[0])
