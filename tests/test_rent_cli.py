"""`gpuwise rent` end to end: the exact CLI form of issue 5, JSON keys, one-line errors."""

import json

import pytest

from gpuwise.cli.main import main

FIG1 = "examples/rent/fig1.yaml"


def run_json(capsys, *args):
    assert main(["rent", FIG1, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_issue_keys(capsys):
    # papers.md A.4: b = 2 -> k = (6, 9), E[T] = 1/3, mu = 1/9.
    out = run_json(capsys, "--budget", "2")
    assert [t["name"] for t in out["types"]] == ["a", "b"]
    assert [t["k"] for t in out["types"]] == pytest.approx([6, 9], abs=1e-6)
    assert out["mean_response_time"] == pytest.approx(1 / 3, abs=1e-6)
    assert out["mu"] == pytest.approx(1 / 9, abs=1e-6)
    assert out["budget_used"] == pytest.approx(2, abs=1e-9)
    # A.4 burstiness: sd ~ 3.95, P(K=0) ~ 0.77
    dist = out["gpus_rented_distribution"]
    assert dist["std"] == pytest.approx(3.95, abs=0.005) and dist["p_zero"] == pytest.approx(0.766, abs=0.001)
    assert isinstance(out["assumptions"], list) and out["assumptions"]


def test_simulate_json(capsys):
    out = run_json(capsys, "--budget", "2", "--simulate", "--jobs", "20000", "--seed", "3", "--no-baselines")
    sim = out["simulated"]
    lo, hi = sim["mean_response_time_ci"]
    assert lo < sim["mean_response_time"] < hi
    assert sim["mean_response_time"] == pytest.approx(1 / 3, rel=0.05)
    assert sim["mean_gpus_rented"] == pytest.approx(2, rel=0.08)
    assert len(sim["mean_gpus_rented_ci"]) == 2


def test_sweep_and_plot(capsys, tmp_path):
    png = tmp_path / "fig1.png"
    out = run_json(capsys, "--budget", "2", "--sweep", "0.7:3.2:0.1", "--plot", str(png))
    assert png.stat().st_size > 1000
    budgets = [r["budget"] for r in out["sweep"]]
    assert min(budgets) > 0.8  # 0.7 and 0.8 are infeasible and skipped
    ets = [r["mean_response_time"] for r in out["sweep"]]
    assert all(x > y for x, y in zip(ets, ets[1:]))  # E[T] falls with the budget (Fig. 1c)


def test_human_output_runs(capsys):
    assert main(["rent", FIG1, "--budget", "2", "--integer", "--simulate", "--jobs", "5000",
                 "--boot-delay", "30", "--billing", "minute", "--instance-sizes", "1,2,4,8", "--verbose"]) == 0
    text = capsys.readouterr().out
    assert "pi*" in text and "Assumptions" in text and "greedy" in text


@pytest.mark.parametrize("args, match", [
    (["--budget", "abc"], "--budget"),
    (["--sweep", "3:1:0.1", "--budget", "2"], "--sweep"),
    (["--budget", "2", "--billing", "fortnight"], "--billing"),
    (["--budget", "2", "--instance-sizes", "0,2"], "--instance-sizes"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, match):
    assert main(["rent", FIG1, *args]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and "Traceback" not in err


def test_infeasible_budget_exits_1(capsys):
    # valid input with no feasible answer: exit 1, not 2 (issue 14's exit-code contract)
    assert main(["rent", FIG1, "--budget", "0.8"]) == 1
    err = capsys.readouterr().err
    assert "minimum feasible budget is above 0.8" in err and err.count("\n") == 1 and "Traceback" not in err


def test_linear_without_cap_is_refused(capsys, tmp_path):
    f = tmp_path / "lin.yaml"
    f.write_text("types:\n  - {name: l, arrival_rate: 1, mean_size: 1, speedup: {linear: true}}\n")
    assert main(["rent", str(f), "--budget", "3"]) == 2
    err = capsys.readouterr().err
    assert "types[0].max_gpus" in err and "set max_gpus" in err and err.count("\n") == 1


def test_trace_driven_stream_fits_rates_from_the_trace(capsys):
    # examples/rent/philly.yaml: 4 weeks of Philly cluster 6c71a0 (bundled trace); rates and size
    # samples fitted from the trace, the simulation replays it (all 7745 jobs).
    assert main(["rent", "examples/rent/philly.yaml", "--budget", "100", "--simulate", "--no-baselines", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["simulated"]["jobs"] == 7745
    assert out["budget_used"] == pytest.approx(100, rel=1e-9)
    assert any("fitted from 7419 jobs" in a for a in out["assumptions"])
    # replaying the same arrivals and sizes, E[T] is exactly the per-job mean of x/s(k): within its CI
    lo, hi = out["simulated"]["mean_response_time_ci"]
    assert lo < out["mean_response_time"] < hi


def test_usd_budget_and_window(capsys):
    out = run_json(capsys, "--budget", "5usd/h", "--window", "24")
    assert out["budget_unit"] == "usd_per_hour" and out["budget_used"] == pytest.approx(5.0)
    w = out["window"]
    assert w["bound"] == pytest.approx(5.0 * 24) and 0 < w["effective_budget"] < 5.0
    assert w["response_time_price"] > 0 and w["p_exceed_at_budget"] > 0.05
