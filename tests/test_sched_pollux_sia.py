"""Pollux, Sia and Optimus+Oracle policies (peers.md sections 2 and 4).

Exact checks: the knapsack DP that replaces Pollux's genetic algorithm equals brute force; Pollux's
per-type allocation equals brute force over its own objective (jobs run, then the p = -1 power mean
of speedups); Sia's HiGHS ILP equals enumeration. Property tests: neither exceeds capacity (with
running jobs fragmenting the cluster; every policy also runs through test_sched_placement's
property tests via the registry).
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.hardware.cluster import make_cluster, pollux_cluster
from gpuwise.policies.base import ClusterState, JobState, SchedView, check_decision
from gpuwise.policies.knapsack import brute_force_optional, configurations, knapsack_allocate
from gpuwise.policies.optimus import marginal_gain
from gpuwise.policies.pollux import Pollux, restart_factor
from gpuwise.policies.sia import Sia, enumerate_assignment, solve_assignment
from gpuwise.policies.value import value_table
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.workload.traces import TraceJob

APPS = ["cifar10", "bert", "ncf", "deepspeech2", "yolov3", "imagenet"]


@st.composite
def knapsacks(draw):
    k = draw(st.integers(1, 10))
    values = []
    for _ in range(draw(st.integers(1, 4))):
        gs = draw(st.lists(st.integers(1, 10), max_size=4, unique=True))
        values.append({g: draw(st.floats(-2.0, 10.0, allow_nan=False)) for g in gs})
    return values, k


@settings(max_examples=200, deadline=None)
@given(knapsacks())
def test_knapsack_equals_brute_force(inst):
    values, k = inst
    total, gs = knapsack_allocate(values, k)
    bf, _ = brute_force_optional(values, k)
    assert abs(total - bf) < 1e-9
    assert sum(gs) <= k
    assert abs(sum(values[j][g] for j, g in enumerate(gs) if g) - total) < 1e-9


def test_configurations_are_sias():
    assert configurations(4, 16) == [1, 2, 4, 8, 12, 16]
    assert configurations(8, 8) == [1, 2, 4, 8]


def _jobs(draw_apps, cluster, perf):
    state = ClusterState(cluster)
    pending, running = {}, {}
    for i, app in enumerate(draw_apps):
        j = TraceJob(f"j{i}", float(i), 2, application=app, batch_size=256 if app in ("cifar10", "ncf") else None)
        js = JobState(job=j, submitted_s=float(i) - 3600.0, target=perf.target(j))
        js.progress = 0.3 * js.target * (i % 3)
        pending[j.name] = js
    return SchedView(pending, running, state, list(pending))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(APPS), min_size=1, max_size=4), st.integers(1, 3))
def test_pollux_allocation_equals_brute_force(apps, nodes):
    """On one type, the exact DP's shares maximise (jobs run, then -sum 1/speedup) over every
    combination of allowed counts (brute force over Pollux's own objective)."""
    cluster = make_cluster([("T4", nodes, 4)])
    perf = GroundTruthPerf(cluster)
    view = _jobs(apps, cluster, perf)
    pol = Pollux(max_growth=None)
    jobs = list(view.pending.values())
    cap = cluster.gpus_of_type("T4")
    shares = pol.allocate_type(jobs, "T4", cap, 4, 0.0, perf)
    opts = [pol.options(js, "T4", cap, 4, 0.0, perf) for js in jobs]

    def score(gs):
        return (sum(1 for g in gs if g), -sum(opts[j][g][0] ** -1 for j, g in enumerate(gs) if g))

    best = max((gs for gs in itertools.product(*[[0, *o] for o in opts]) if sum(gs) <= cap), key=score)
    got = [shares[js.name][1] if js.name in shares else 0 for js in jobs]
    assert score(got)[0] == score(best)[0]
    assert abs(score(got)[1] - score(best)[1]) < 1e-9


XL_SHARDED = ("name: xl\nmodel: gpt2-xl\ntraining: {tokens: 1.0e6, seq_len: 512, global_batch: [16, 64], "
              "precision: fp16-mixed, optimizer: adamw, noise_scale: 64}\nparallelism: {tp: [1], pp: [1], zero: [3]}\n")


@pytest.fixture(scope="module")
def sharded_job(tmp_path_factory):
    """gpt2-xl allowed only ZeRO-3: one T4 is infeasible (ZeRO-3 needs >= 2 ranks), its goodput object
    says how many it needs."""
    from gpuwise.estimate.goodput import JobGoodput

    path = tmp_path_factory.mktemp("xl") / "xl.yaml"
    path.write_text(XL_SHARDED)
    n0 = JobGoodput.from_jobspec(str(path)).fewest_gpus("T4", 4, 64)
    assert n0 is not None and n0 >= 2
    return str(path), n0


def test_pollux_starts_a_job_whose_smallest_width_is_more_than_one_gpu(sharded_job):
    """Issue 13: a job that runs on no single GPU must still be offered the fewest GPUs it runs on (the
    growth cap used to offer it one GPU only, so it stayed pending forever), and its speedup base is
    that count, as one GPU is for a job that fits on one."""
    path, n0 = sharded_job
    cluster = pollux_cluster()
    perf = GroundTruthPerf(cluster)
    js = JobState(TraceJob("g", 0.0, 4, batch_size=64, jobspec=path), submitted_s=0.0, target=1.0)
    cap = cluster.gpus_of_type("T4")
    v, _, _ = value_table(perf, js, "T4", cap, 4, elastic=True, objective="speedup")
    assert not np.isfinite(v[1:n0]).any() and v[n0] == 1.0 and v[2 * n0] > 1.0
    pol = Pollux()
    assert min(pol.options(js, "T4", cap, 4, 0.0, perf)) == n0
    cifar = JobState(TraceJob("c", 0.0, 4, application="cifar10", batch_size=256), submitted_s=0.0, target=1.0)
    assert sorted(pol.options(cifar, "T4", cap, 4, 0.0, perf)) == [1]


def test_sia_scores_a_job_relative_to_the_fewest_gpus_it_runs_on(sharded_job):
    """A job that runs on no single T4: its scores are relative to its goodput on the fewest GPUs it runs
    on (before, the missing one-GPU base made every option score the same, so Sia had no reason to scale it)."""
    path, n0 = sharded_job
    cluster = pollux_cluster()
    perf = GroundTruthPerf(cluster)
    js = JobState(TraceJob("g", 0.0, 4, batch_size=64, jobspec=path), submitted_s=0.0, target=1.0)
    sia = Sia()
    opts, _ = sia.job_options(js, 0.0, SchedView({"g": js}, {}, ClusterState(cluster), ["g"]), perf)
    score = {n: s for _, n, s in opts}
    assert min(score) >= n0 and score[min(score)] <= sia.lambda_n - 1.0 + 1e-9
    assert max(score.values()) > score[min(score)]


def test_restart_factor_is_the_share_of_life_spent_working():
    js = JobState(job=TraceJob("a", 0.0, 1, application="ncf", batch_size=256), submitted_s=0.0, target=1.0)
    js.restarts = 2
    assert restart_factor(js, 600.0, 30.0) == (600 - 60) / 630
    assert restart_factor(js, 30.0, 30.0) == 0.0


@st.composite
def ilps(draw):
    types = {t: draw(st.integers(1, 8)) for t in draw(st.lists(st.sampled_from("ABC"), min_size=1,
                                                              max_size=2, unique=True))}
    options = []
    for _ in range(draw(st.integers(1, 4))):
        opts = [(t, draw(st.integers(1, 8)), draw(st.floats(-1.0, 5.0, allow_nan=False)))
                for t in draw(st.lists(st.sampled_from(sorted(types)), max_size=3))]
        options.append(opts)
    return options, types


@settings(max_examples=60, deadline=None)
@given(ilps())
def test_sia_ilp_equals_enumeration(inst):
    options, cap = inst
    picks = solve_assignment(options, cap)
    used = dict.fromkeys(cap, 0)
    total = 0.0
    for opts, k in zip(options, picks):
        if k is not None:
            used[opts[k][0]] += opts[k][1]
            total += opts[k][2]
    assert all(used[t] <= cap[t] for t in cap)
    assert abs(total - enumerate_assignment(options, cap)) < 1e-6


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(APPS), min_size=1, max_size=8), st.sampled_from(["pollux", "sia"]))
def test_neither_exceeds_capacity_on_a_mixed_cluster(apps, name):
    cluster = make_cluster([("T4", 2, 4), ("V100", 1, 8)])
    perf = GroundTruthPerf(cluster)
    view = _jobs(apps, cluster, perf)
    pol = Pollux() if name == "pollux" else Sia()
    d = pol.schedule(0.0, view, perf)
    check_decision(view, d)
    assert all(a.num_gpus <= cluster.gpus_of_type(a.gpu_type) for a in d.allocations.values() if a)


def test_optimus_marginal_gain_steps_to_the_largest_cut():
    inf = np.inf
    a = np.array([inf, 10.0, 5.0, 4.0, 3.9])   # halves at 2 GPUs, then flat
    b = np.array([inf, 10.0, 9.5, 9.2, 9.0])   # barely scales
    # both get 1; then a's steps (cuts 5 and 1 s per GPU) beat b's first step (0.5 s)
    assert marginal_gain([a, b], 4) == [3, 1]


def test_pollux_beats_optimus_and_las_on_a_small_stream():
    """Ordering of the Pollux paper (Table 2): Pollux < Optimus+Oracle and < Tiresias on mean JCT,
    on the first 20 jobs of workload-6 at 4x load (a small contended stream)."""
    from gpuwise.data import data_path
    from gpuwise.policies.registry import make_policy
    from gpuwise.sim.cluster import simulate
    from gpuwise.sim.metrics import summarise
    from gpuwise.workload.traces import Workload, load_workload
    from gpuwise.workload.transforms import at_load

    w = at_load(load_workload(data_path("pollux", "workloads", "workload-6.csv")), 4.0)
    w = Workload(w.jobs[:20], w.source, w.format)
    jct = {p: summarise(simulate(pollux_cluster(), w, make_policy(p)))["mean_jct_s"]
           for p in ("pollux", "optimus", "las")}
    assert jct["pollux"] < jct["optimus"] and jct["pollux"] < jct["las"], jct
