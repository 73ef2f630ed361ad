"""The replay of a finished `gpuwise run` (`gpuwise.runtime.replay`), on a run record built here
(no Ray): what it charges for a first start and for a rescale, and the same-decisions JCT."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwise.hardware.cluster import make_cluster
from gpuwise.policies.base import JobState
from gpuwise.policies.elastic_dp import ElasticDP
from gpuwise.runtime.actuator import JobRun
from gpuwise.runtime.driver import RunResult
from gpuwise.runtime.measured import PRIOR_PARAMS, MeasuredPerf, OnlineFit
from gpuwise.runtime.replay import (
    AsSeen,
    MeasuredTruth,
    compare,
    replay,
    rescale_dead_s,
    same_decisions_jct,
)
from gpuwise.runtime.workload import jobs_from_rows
from gpuwise.sim.cluster import SimResult

CLUSTER = make_cluster([("T4", 1, 2)], name="two-slots")
STEP_S = 0.12     # every chunk's measured wall time per step
CHUNKS = 30       # chunks of 10 steps at 1 slot x batch 16


def _run() -> RunResult:
    """One job that ran 30 chunks on 1 slot (batch 16; one configuration, so its model is that
    configuration's mean step time), first started 4 s after its reservation, rescaled once 0.7 s after a chunk boundary; its JCT 40 s."""
    wl = jobs_from_rows([{"name": "a", "time": "0", "num_gpus": "1", "application": "tiny-llama", "steps": "300",
                          "batch_size": "16"}], "test")
    job = wl.jobs[0]
    fit = OnlineFit(ref_batch=16)
    fit.points = [(1, 1, 16.0, STEP_S, 0.0)] * CHUNKS
    fit.refit(force=True)
    fit.trained = {16: 10 * CHUNKS}
    js = JobState(job=job, submitted_s=0.0, target=300.0, last_update=0.0, job_index=0)
    js.status, js.finish_s, js.progress = "done", 40.0, 300.0
    jr = JobRun(js, fit)
    jr.overheads = [4.0, 1.5]
    jr.chunks = [(4.0 + 1.2 * (i + 1), 10) for i in range(CHUNKS)]
    jr.events = [{"t": 0.0, "kind": "submit"},
                 {"t": 4.0, "kind": "start", "gpus": 1, "nodes": 1, "batch": 16},
                 {"t": jr.chunks[14][0] + 0.7, "kind": "rescale", "gpus": 1, "nodes": 1, "batch": 16},
                 {"t": 40.0, "kind": "done"}]
    sim = SimResult.__new__(SimResult)
    sim.restart_s = 2.75          # the run's mean of all overheads: what the replay used to charge
    return RunResult(sim, {"a": jr}, 0.0, False, 0), wl


def test_rescale_dead_time_is_boundary_to_training_again():
    run, _ = _run()
    assert rescale_dead_s(run.runs["a"]) == [pytest.approx(0.7)]


def test_same_decisions_keeps_time_outside_chunks_and_swaps_chunk_times_for_the_model():
    run, _ = _run()
    jr = run.runs["a"]
    assert same_decisions_jct(jr) == pytest.approx(40.0)   # the model is the mean of its one configuration
    faster = OnlineFit(ref_batch=16)
    faster.points = [(1, 1, 16.0, 0.10, 0.0)]
    faster.refit(force=True)
    jr.model = replace(jr.model, params=faster.params)      # a model 0.02 s/step faster than the chunks
    assert same_decisions_jct(jr) == pytest.approx(40.0 - 300 * 0.02)
    jr.chunks = jr.chunks[:-1]                              # a chunk not recorded: no answer, not a guess
    assert same_decisions_jct(jr) is None


def test_the_policy_replay_charges_the_measured_first_start_then_the_rescale_dead_time():
    run, wl = _run()
    out = replay(CLUSTER, wl, lambda: ElasticDP(min_interval_s=5.0, period_s=None), run)
    assert out.restart_s == pytest.approx(0.7) and out.first_start_s == {"a": 4.0}
    allocs = [a for a in out.allocations["a"] if a["kind"] == "start"]
    assert allocs[0]["t"] == 0.0 and allocs[0]["trains_from"] == pytest.approx(4.0)
    # alone on the cluster, no periodic rounds: one allocation; the first start, then the target at the model's rate
    assert len(allocs) == 1
    first = allocs[0]
    rate = MeasuredPerf({"a": run.runs["a"].model}).rates(wl.jobs[0], "T4", first["gpus"], first["nodes"],
                                                           first["batch"])[0]
    assert out.jct["a"] == pytest.approx(4.0 + 300.0 / rate, rel=1e-6)   # 2.75 s (the old mean) would be early
    assert out.oracle_jct == out.jct           # no record of what the run's policy read: the final model
    rows, medians = compare(run, out)
    assert rows[0]["replay_allocations"] == out.allocations["a"] and medians["jct_median_error"] == rows[0]["jct_error"]
    assert medians["jct_median_error_same_decisions"] == pytest.approx(0.0, abs=1e-9)


def test_the_policy_sees_the_model_the_run_read_at_the_same_time():
    run, wl = _run()
    final = run.runs["a"].model
    seen = [(0.0, PRIOR_PARAMS, 16.0), (20.0, final.params, 50.0)]
    clock = [5.0]
    view = AsSeen({"a": final}, {"a": seen}, now=lambda: clock[0])
    assert view.model(wl.jobs[0]).params == PRIOR_PARAMS and view.model(wl.jobs[0]).phi == 16.0
    clock[0] = 25.0
    assert view.model(wl.jobs[0]).params == final.params and view.model(wl.jobs[0]).phi == 50.0
    # the run's policy read a large noise scale until t=20 (a large batch pays), then a tiny one: the
    # replay's policy takes the same two decisions at the same times; seeing the final model, one
    run.runs["a"].seen = [(0.0, final.params, 1000.0), (20.0, final.params, 1.0)]
    out = replay(CLUSTER, wl, lambda: ElasticDP(min_interval_s=5.0, period_s=5.0), run)
    assert [(a["t"], a["batch"]) for a in out.allocations["a"] if a["kind"] == "start"] == [(0.0, 64), (20.0, 16)]
    assert out.jct["a"] > out.oracle_jct["a"]


def test_the_truth_at_a_measured_configuration_is_its_measured_step_time():
    run, wl = _run()
    job, fit = wl.jobs[0], run.runs["a"].model
    fit.points = fit.points + [(1, 2, 8.0, 0.30, 0.0)] * 3     # measured at 2 slots, slower than the fit says
    fitted, truth = MeasuredPerf({"a": fit}), MeasuredTruth({"a": fit})
    at2 = float(fit.step_time(1, 2, 8.0))
    assert at2 < 0.2
    assert truth.rates(job, "T4", 2, 1, 16)[0] == pytest.approx(fitted.rates(job, "T4", 2, 1, 16)[0] * at2 / 0.30)
    assert truth.rates(job, "T4", 1, 1, 16)[0] == pytest.approx(fitted.rates(job, "T4", 1, 1, 16)[0])  # fit = mean
    assert truth.rates(job, "T4", 2, 1, 32)[0] == fitted.rates(job, "T4", 2, 1, 32)[0]        # not measured: the fit
