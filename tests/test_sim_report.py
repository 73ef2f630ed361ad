"""simulate / compare report each job (wait, run, GPUs and type, JCT), utilisation per GPU type and a
fairness figure, in JSON and in tables; the plots keep counts at zero and short runs in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = str(ROOT / "examples/workloads/small.csv")
HETERO = str(ROOT / "examples/clusters/hetero-t4-v100-a100.yaml")


def _json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_per_job_results_add_up_to_the_run(capsys):
    out = _json(capsys, "compare", "--cluster", HETERO, "--workload", SMALL, "--policy", "fifo",
                "--policy", "elastic-dp")
    for name, m in out["policies"].items():
        jobs = m["per_job"]
        assert len(jobs) == m["jobs"] == 6
        done = [j for j in jobs if j["status"] == "done"]
        for j in done:   # wait + run = JCT; a job runs on the GPU types of its allocations
            assert j["wait_s"] >= 0 and j["run_s"] > 0
            assert j["wait_s"] + j["run_s"] == pytest.approx(j["jct_s"])
            assert j["allocations"] and set(j["gpu_hours_by_type"]) <= {a["gpu_type"] for a in j["allocations"]}
        assert sum(j["jct_s"] for j in done) / len(done) == pytest.approx(m["mean_jct_s"])
        by_type = m["utilisation_by_type"]
        assert set(by_type) == {"T4", "V100-16GB-SXM2", "A100-40GB-SXM"}
        # the per-type GPU-hours are the run's GPU-hours, split; so are the jobs' own
        assert sum(t["gpu_hours"] for t in by_type.values()) == pytest.approx(m["gpu_hours"], rel=1e-9)
        assert sum(sum(j["gpu_hours_by_type"].values()) for j in jobs) == pytest.approx(m["gpu_hours"], rel=1e-9)
        total = sum(t["gpus"] for t in by_type.values())
        assert sum(t["utilisation"] * t["gpus"] for t in by_type.values()) / total == pytest.approx(m["utilisation"])
        slow = [j["jct_s"] / j["run_s"] for j in done]
        jain = sum(slow) ** 2 / (len(slow) * sum(x * x for x in slow))
        assert m["fairness"]["jain_index"] == pytest.approx(jain) and 0 < jain <= 1
    assert any("Jain's index" in a for a in out["assumptions"])


def test_fifo_queueing_shows_in_waits_and_lowers_fairness(capsys):
    """workload-6 under FIFO on 64 T4: jobs wait, slowdowns differ, so Jain's index is below 1."""
    m = _json(capsys, "simulate", "--workload", str(ROOT / "gpuwise/data/pollux/workloads/workload-6.csv"),
              "--policy", "fifo")
    waits = [j["wait_s"] for j in m["per_job"] if j["wait_s"] is not None]
    assert max(waits) > 0 and min(waits) == 0
    assert m["fairness"]["jain_index"] < 0.9 and m["fairness"]["max_slowdown"] > 1


def test_human_tables_show_jobs_and_types(capsys):
    capsys.readouterr()
    assert main(["compare", "--cluster", HETERO, "--workload", SMALL, "--policy", "frenzy", "--policy", "fifo",
                 "--show-jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "A100-40GB-SXM utilisation" in out and "Jain's index" in out
    assert out.count("per job, in arrival order") == 2 and "4 more jobs: --show-jobs 6" in out
    assert "resnet-a" in out and "rigid-a" not in out.split("fifo: per job")[1]   # third to arrive: hidden
    assert main(["simulate", "--workload", SMALL, "--policy", "fifo", "--show-jobs", "-1"]) == 2


def test_plots_keep_counts_at_zero_and_short_runs_in_seconds():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpuwise.sim.plots import jct_figure, level_figure, time_unit

    assert time_unit(40) == ("s", 1.0) and time_unit(1800)[0] == "min" and time_unit(5 * 3600)[0] == "h"
    run = {"fifo": {"jct_s": [5.0, 30.0, 38.0], "queue_len": [(0.0, 0.0), (39.0, 0.0)],
                    "gpus_used": [(0.0, 2.0), (39.0, 0.0)]}}
    queue = level_figure(run, "queue_len", "jobs waiting")      # a queue that never forms
    ax = queue.axes[0]
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1 and ax.get_xlabel() == "time (s)"
    gpus = level_figure(run, "gpus_used", "GPUs in use", 4)
    assert gpus.axes[0].get_ylim() == (0.0, 4.2)
    cdf = jct_figure(run)
    assert cdf.axes[0].get_xlabel() == "job completion time (s)"
    for f in (queue, gpus, cdf):
        plt.close(f)
