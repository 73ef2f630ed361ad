"""`gpuwise run` refuses bad input with one line and exit code 2, before starting Ray."""

from __future__ import annotations

import pytest

from gpuwise.cli.main import main


@pytest.mark.parametrize("row, field", [
    ("a,0,1,tiny-bert,10,16", "application"),
    ("a,0,1,tiny-llama,0,16", "steps"),
    ("a,0,9,tiny-llama,10,16", "num_gpus"),
])
def test_bad_rows_name_the_field(tmp_path, capsys, row, field):
    wl = tmp_path / "w.csv"
    wl.write_text("name,time,num_gpus,application,steps,batch_size\n" + row + "\n")
    rc = main(["run", "--cluster", "examples/run/cluster.yaml", "--workload", str(wl), "--policy", "fifo",
               "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"column {field}" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_shipped_example_parses():
    from gpuwise.runtime.workload import load_run_workload

    wl = load_run_workload("examples/run/workload.csv")
    assert 4 <= len(wl.jobs) <= 6 and {j.application for j in wl.jobs} == {"tiny-llama", "tiny-resnet"}


def test_bad_round_s_names_the_flag(tmp_path, capsys):
    rc = main(["run", "--cluster", "examples/run/cluster.yaml", "--workload", "examples/run/workload.csv",
               "--policy", "fifo", "--round-s", "0", "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--round-s" in err and len(err.splitlines()) == 1


def test_run_sets_the_simulate_policy_to_the_runs_time_scale():
    from gpuwise.policies.elastic_dp import ElasticDP
    from gpuwise.policies.registry import make_policy
    from gpuwise.runtime.report import at_time_scale

    p = at_time_scale(make_policy("elastic-dp"), 5.0)
    assert type(p) is ElasticDP and p.min_interval_s == 5.0 and p.period_s == 5.0
    assert at_time_scale(make_policy("fifo"), 5.0).period_s is None  # a policy without rounds keeps none
