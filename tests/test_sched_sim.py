"""Trace-driven simulator: reproduced relations and CLI contracts.

Relations (papers.md C.7 and E.5 -- qualitative targets, checked with margins):
- elastic-scaling paper: under high load with drop admission the elastic DP completes ~2x the jobs
  of the fixed-batch DP (we require >= 1.5x) and has lower mean JCT over the jobs both complete
  (the mean over *all* completions is higher with the workload's own top-of-range batches: it also
  finishes the long ImageNet/BERT jobs the baseline drops; with mid-range batches at 16x load both
  relations hold, tests/test_sched_elastic_load.py); with queue admission its
  mean JCT is far lower (paper: up to ~10x; we require >= 3x);
- Frenzy: plan-and-place mean JCT no worse than first-fit with user requests on every Pollux
  workload, on the Pollux testbed and on a heterogeneous cluster (three GPU types, its setting).
"""

import dataclasses
import json

import pytest

from gpuwise.cli.main import main
from gpuwise.data import data_path
from gpuwise.hardware.cluster import load_cluster, pollux_cluster
from gpuwise.policies.elastic_dp import ElasticDP
from gpuwise.policies.registry import POLICIES, make_policy
from gpuwise.sim.cluster import simulate
from gpuwise.sim.metrics import summarise
from gpuwise.workload.traces import Workload, load_workload

W6 = data_path("pollux", "workloads", "workload-6.csv")
HIGH = "examples/workloads/pollux-w6-4x-load.csv"
HETERO = "examples/clusters/hetero-t4-v100-a100.yaml"


def _run(workload, policy, cluster=None, **kw):
    return summarise(simulate(cluster or pollux_cluster(), workload, policy, **kw))


def _jcts(res):
    return {j.name: j.finish_s - j.submitted_s for j in res.jobs if j.status == "done"}


def test_elastic_dp_completes_more_under_high_load_with_drop():
    """Paper (Saxena et al. MASCOTS'20): ~2x jobs completed (>= 1.5x here; measured 155 vs 75)
    and lower mean JCT -- like-for-like over the jobs both policies complete (measured 0.46 vs
    0.50 h since a refused job no longer blocks the later ones; we require a 5% margin)."""
    from gpuwise.sim.metrics import common_jct

    w = load_workload(HIGH)
    el_res = simulate(pollux_cluster(), w, ElasticDP(elastic=True, admission="drop"))
    fx_res = simulate(pollux_cluster(), w, ElasticDP(elastic=False, admission="drop"))
    el, fx = summarise(el_res), summarise(fx_res)
    assert el["jobs_completed"] >= 1.5 * fx["jobs_completed"]
    assert el["jobs_dropped"] < fx["jobs_dropped"]
    assert el["jobs_completed"] + el["jobs_dropped"] == 160
    n, mean = common_jct({"el": _jcts(el_res), "fx": _jcts(fx_res)})
    assert n >= 0.9 * fx["jobs_completed"]  # nearly every job the baseline finishes, elastic does too
    assert mean["el"] <= 0.95 * mean["fx"]


@pytest.mark.parametrize("objective", ["job", "remaining", "request", "speedup"])
def test_every_objective_completes_more_with_drop(objective):
    """The ~2x completion relation does not hinge on the unpublished normalisation of V_j(g)
    (papers.md C.3): every objective completes >= 1.5x the fixed-batch DP's jobs."""
    w = load_workload(HIGH)
    el = _run(w, ElasticDP(elastic=True, admission="drop", objective=objective))
    fx = _run(w, ElasticDP(elastic=False, admission="drop", objective=objective))
    assert el["jobs_completed"] >= 1.5 * fx["jobs_completed"]
    assert any(f"objective {objective}" in a for a in el["assumptions"])


def test_unknown_objective_is_input_error():
    from gpuwise.errors import InputError

    with pytest.raises(InputError, match="--objective"):
        ElasticDP(objective="throughput")


def test_cli_objective_choices_match_the_policy():
    import argparse

    from gpuwise.cli.simulate import add_common
    from gpuwise.policies.value import OBJECTIVES

    p = argparse.ArgumentParser()
    add_common(p)
    assert next(a for a in p._actions if a.dest == "objective").choices == tuple(OBJECTIVES)


def test_elastic_dp_lower_mean_jct_with_queue_admission():
    w = load_workload(W6)
    el = _run(w, ElasticDP(elastic=True, admission="queue"))
    fx = _run(w, ElasticDP(elastic=False, admission="queue"))
    assert el["jobs_completed"] == fx["jobs_completed"] == 160
    assert el["mean_jct_s"] * 3 <= fx["mean_jct_s"]


@pytest.mark.parametrize("cluster", ["pollux", "hetero"])
def test_frenzy_no_worse_than_first_fit_on_every_pollux_workload(cluster):
    """Frenzy (papers.md E.5 target 3): mean JCT no worse than first-fit with the user's requests
    (the paper reports 12-18% lower). Checked on all 8 Pollux workloads, on the Pollux testbed
    (measured ratios 0.52-0.97) and the heterogeneous cluster (0.36-0.81); exact (deterministic)."""
    cl = pollux_cluster() if cluster == "pollux" else load_cluster(HETERO)
    for i in range(1, 9):
        w = load_workload(data_path("pollux", "workloads", f"workload-{i}.csv"))
        fr = _run(w, make_policy("frenzy"), cl)
        ff = _run(w, make_policy("first-fit"), cl)
        assert fr["jobs_completed"] == ff["jobs_completed"] == 160
        assert fr["mean_jct_s"] <= ff["mean_jct_s"], f"workload-{i}"


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_finishes_small_stream_within_capacity(name):
    w = load_workload("examples/workloads/small.csv")
    cl = load_cluster(HETERO)
    res = simulate(cl, w, make_policy(name))
    m = summarise(res)
    assert m["jobs_completed"] + m["jobs_dropped"] == len(w)
    assert m["peak_gpus_used"] <= cl.total_gpus
    for js in res.jobs:
        if js.status == "done":
            assert js.finish_s >= js.submitted_s + 30.0  # at least one restart delay
    assert m["assumptions"]


def test_fifo_rigid_jobs_take_their_duration():
    w = load_workload("examples/workloads/small.csv")
    rigid = Workload(tuple(j for j in w.jobs if j.rigid), "x", "gpuwise")
    res = simulate(pollux_cluster(), rigid, make_policy("fifo"), restart_s=0.0)
    for js in res.jobs:  # an empty cluster: JCT = logged duration exactly
        assert js.finish_s - js.submitted_s == pytest.approx(js.job.duration_s)


def test_reproducible_with_seed():
    w = load_workload(W6)
    w = Workload(w.jobs[:40], w.source, w.format)
    a = _run(w, make_policy("elastic-dp"), seed=3, speed_noise=0.2)
    b = _run(w, make_policy("elastic-dp"), seed=3, speed_noise=0.2)
    c = _run(w, make_policy("elastic-dp"), seed=4, speed_noise=0.2)
    keys = ("mean_jct_s", "makespan_s", "gpu_hours", "jobs_completed")
    assert [a[k] for k in keys] == [b[k] for k in keys]
    assert a["mean_jct_s"] != c["mean_jct_s"]


def test_cli_simulate_json_top_level(capsys):
    assert main(["simulate", "--workload", "examples/workloads/small.csv", "--policy", "frenzy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("mean_jct_s", "p99_jct_s", "makespan_s", "jobs_completed", "jobs_dropped", "gpu_hours",
              "mean_decision_ms", "assumptions"):
        assert k in out
    assert out["cluster"] == "pollux-16x4-t4" and out["jobs_completed"] == 6


def test_cli_compare_json_and_plots(capsys, tmp_path):
    rc = main(["compare", "--workload", "examples/workloads/small.csv", "--cluster", HETERO,
               "--policy", "fifo", "--policy", "elastic-dp", "--json", "--plot", str(tmp_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"fifo", "elastic-dp"}
    assert out["policies"]["fifo"]["jobs_completed_by_all"] == 6
    assert out["policies"]["fifo"]["mean_jct_common_s"] == pytest.approx(out["policies"]["fifo"]["mean_jct_s"])
    assert out["policies"]["fifo"]["jobs_completed"] == 6
    for f in ("jct_cdf.png", "gpus_in_use.png", "queue_length.png"):
        assert (tmp_path / f).stat().st_size > 1000


def test_cli_bad_input_exit_2(capsys, tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("name,time,application,num_replicas,batch_size\na,1,cifar10,4,512\nb,2,cifar10,80,512\n")
    assert main(["simulate", "--workload", str(f), "--policy", "fifo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "row 2 column num_replicas" in err and "\n" not in err
    assert main(["simulate", "--workload", str(f), "--policy", "nope"]) == 2
    assert main(["compare", "--workload", str(f), "--policy", "fifo", "--cluster", "missing.yaml"]) == 2


def test_high_load_file_is_workload6_compressed():
    a, b = load_workload(W6), load_workload(HIGH)
    assert [j.name for j in a.jobs] == [j.name for j in b.jobs]
    assert all(abs(y.arrival_s - round(x.arrival_s / 4)) < 1e-9 for x, y in zip(a.jobs, b.jobs))
    assert dataclasses.replace(b.jobs[0], arrival_s=a.jobs[0].arrival_s) == a.jobs[0]


@pytest.mark.slow
def test_policies_with_the_fitted_shared_model():
    """--policy-model fitted: the policy sees the shared JobModel (Pollux fit + constant noise
    scale) while jobs advance with the measured truth; model error costs little on workload-6
    (mean JCT within 1.5x of the oracle run)."""
    w = load_workload(W6)
    oracle = _run(w, make_policy("elastic-dp"))
    fitted = _run(w, make_policy("elastic-dp"), policy_model="fitted")
    assert fitted["jobs_completed"] == 160
    assert fitted["mean_jct_s"] <= 1.5 * oracle["mean_jct_s"]
    assert any("JobModel" in a for a in fitted["assumptions"])
