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


def test_devices_cuda_without_enough_gpus_is_one_line_exit_2(tmp_path, capsys):
    """--devices cuda where this machine has fewer CUDA devices than the spec's 8 slots (every CI machine):
    refused before any state is written or Ray starts."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 8:
        pytest.skip("this machine has 8 CUDA devices: --devices cuda is valid here")
    rc = main(["run", "--cluster", "examples/run/cluster.yaml", "--workload", "examples/run/workload.csv",
               "--policy", "fifo", "--devices", "cuda", "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--devices: 'cuda' is invalid" in err and "8 slots" in err and "--devices cpu" in err
    assert not (tmp_path / "s").exists()


def test_devices_override_is_checked():
    assert main(["run", "--cluster", "examples/run/cluster.yaml", "--workload", "examples/run/workload.csv",
                 "--policy", "fifo", "--devices", "gpu"]) == 2


def test_gpu_smoke_example_parses():
    from gpuwise.hardware.cluster import load_cluster
    from gpuwise.runtime.workload import load_run_workload

    cluster = load_cluster("examples/run/one-h200.yaml")
    assert cluster.total_gpus == 1 and set(cluster.gpu_types) == {"H200-SXM"}
    wl = load_run_workload("examples/run/gpu-smoke.yaml")
    assert len(wl.jobs) == 3 and all(j.num_gpus == 1 for j in wl.jobs)
