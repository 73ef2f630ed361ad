"""`gpuwise run` on a real local Ray cluster (issue 12): real PyTorch training moved by the same
policy classes as the simulator. One Ray instance and one warm worker pool (3 fake GPU slots on
one node) serve every test of the session; jobs are tiny (a few chunks of 5 steps).
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

from gpuwise.hardware.cluster import make_cluster  # noqa: E402
from gpuwise.policies.elastic_dp import ElasticDP  # noqa: E402
from gpuwise.runtime.driver import RunOptions  # noqa: E402
from gpuwise.runtime.report import execute  # noqa: E402
from gpuwise.runtime.workload import jobs_from_rows  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(240)]

CLUSTER = make_cluster([("T4", 1, 3)], name="test-3-slots")  # one type: jobs compete for the slots
K = 5  # steps per chunk = checkpoint interval


@pytest.fixture(scope="session")
def pool(tmp_path_factory):
    from gpuwise.runtime.pool import WorkerPool

    p = WorkerPool(CLUSTER, tmp_path_factory.mktemp("ray"), timeout_s=200.0)
    try:
        p.start()
        yield p
    finally:
        p.shutdown()


def _workload(*rows):
    cols = ("name", "time", "num_gpus", "application", "steps", "batch_size", "min_batch", "max_batch")
    return jobs_from_rows([dict(zip(cols, map(str, r))) for r in rows], "test")


def _opts(tmp_path, **kw):
    kw.setdefault("max_wall_s", 200.0)
    return RunOptions(tmp_path / "state", chunk_steps=K, **kw)


def _elastic():
    return ElasticDP(min_interval_s=4.0, period_s=None)  # the simulate policy, rounds faster


def test_elastic_dp_rescales_width_and_batch_and_the_simulator_agrees(pool, tmp_path):
    # by construction: a long job is alone on the 3 slots (elastic DP gives it all of them), then a
    # short job arrives, the long one must give up slots for it, and gets them back when it is done;
    # each width has its own best batch in the range, so each of those rebuilds changes both.
    # The long job is 15x the short one and its range is wide (8..192), so it is still training
    # when the short one comes and goes, however fast or loaded the machine is.
    wl = _workload(("long", 0, 1, "tiny-llama", 900, 16, 8, 192), ("short", 2, 1, "tiny-resnet", 60, 16, 8, 64))
    out = execute(CLUSTER, wl, "elastic-dp", _opts(tmp_path), pool=pool, make=_elastic)
    assert out["jobs_completed"] == 2 and out["jobs_unfinished"] == 0
    starts = {j["name"]: [e for e in j["events"] if e["kind"] in ("start", "rescale")] for j in out["jobs"]}
    widths = [e["gpus"] for e in starts["long"]]
    assert len(widths) >= 2 and len(set(widths)) >= 2, starts   # the long job's width changed
    changed = [(a, b) for a, b in zip(starts["long"], starts["long"][1:])
               if a["gpus"] != b["gpus"] and a["batch"] != b["batch"]]
    assert out["rescales"] >= 1 and changed, starts
    for j in out["jobs"]:
        assert j["steps"] > 0 and j["last_loss"] < j["first_loss"]  # it really trained
        assert j["measured_jct_s"] > 0 and j["simulated_jct_s"] > 0
        assert math.isfinite(j["noise_scale"]) and j["noise_scale"] > 0
    # resumed at the checkpoint the rescale wrote: the step counter continues
    for evs in starts.values():
        for e in evs[1:]:
            assert e["checkpoint"] is not None and e["checkpoint"].endswith(f"{e['step']:07d}.pt")
    # the simulator replays the run: 0.16 alone on a 2-core machine, 0.53 once in a full suite beside the other
    # worker's tests (rescales land on load spikes the replay does not see); 0.75 still catches a 2x disagreement
    assert out["jct_median_error"] is not None and out["jct_median_error"] < 0.75, out["jct_median_error"]
    # every chunk's measured step time is written as validation data, next to the goodput object's prediction
    from gpuwise.validation.runs import load_runs

    rows = load_runs(tmp_path / "state")
    assert {r.job for r in rows} == {"long", "short"} and all(r.measured_step_s > 0 and r.device == "cpu" for r in rows)
    assert sum(r.predicted_step_s is not None for r in rows) >= len(rows) / 2
    assert all(r.measured_peak_gib is None for r in rows)      # no CUDA here: no peak memory measured


def test_preemptions_are_recovered_with_bounded_lost_steps(pool, tmp_path):
    # a killed worker restarts (re-imports torch: 30-60 s on a loaded 2-core machine), so at most 2
    wl = _workload(("a", 0, 2, "tiny-llama", 120, 16, 16, 16), ("b", 0, 1, "tiny-resnet", 120, 16, 16, 16))
    out = execute(CLUSTER, wl, "fifo", _opts(tmp_path, preempt_every_s=3.0, max_preemptions=2), pool=pool)
    assert out["jobs_completed"] == 2, [j["events"] for j in out["jobs"]]
    # every injected preemption is a fault; a rebuild may fault once more (e.g. a worker restarting
    # under it), and each fault is recovered from its checkpoint
    reasons = [e["reason"] for j in out["jobs"] for e in j["events"] if e["kind"] == "fault"]
    print("fault reasons:", reasons)
    assert out["preemptions_injected"] >= 1 and out["restarts"] >= out["preemptions_injected"]
    assert out["lost_steps"] <= K * out["restarts"]
    for j in out["jobs"]:
        faults = [e for e in j["events"] if e["kind"] == "fault"]
        for f in faults:
            assert f["lost_steps"] <= K and f["resume_step"] % K == 0


def test_a_restarted_run_resumes_from_its_sqlite_state(pool, tmp_path):
    # 10 s for the first run: a loaded 2-core machine once made no checkpoint within 4 s; 900 steps: this one made
    # 250 in 8 s, so a machine several times faster still stops it unfinished
    wl = _workload(("g", 0, 1, "tiny-llama", 900, 16, 16, 16),)
    first = execute(CLUSTER, wl, "frenzy", _opts(tmp_path, max_wall_s=10.0), pool=pool)
    assert first["jobs_unfinished"] == 1
    done_before = first["jobs"][0]["steps"]
    second = execute(CLUSTER, wl, "frenzy", _opts(tmp_path), pool=pool)
    assert second["resumed"] and second["jobs_completed"] == 1
    starts = [e for e in second["jobs"][0]["events"] if e["kind"] == "start"]
    assert starts[-1]["step"] == done_before > 0   # continued from the recorded checkpoint
    assert second["jobs"][0]["steps"] == 900


def test_any_width_resumes_exactly(pool):
    """Data follow the global step: 2 chunks on one worker == 1 chunk on one + 1 on two after a checkpoint."""
    import ray

    from gpuwise.runtime.worker import free_port

    a, b = pool.slots[0].actor, pool.slots[1].actor
    spec = {"model": "tiny-llama", "seed": 7, "lr": 3e-3}
    ck = str(pool.tmpdir / "exact.pt")
    get = lambda refs: ray.get(refs, timeout=120)  # noqa: E731
    get(a.setup.remote(spec, 0, 1, "127.0.0.1", free_port(), None, 60))
    get(a.chunk.remote(0, 3, 8, 3e-3, ck))
    one = get(a.chunk.remote(3, 3, 8, 3e-3, None))["loss"]
    port = free_port()
    get([a.setup.remote(spec, 0, 2, "127.0.0.1", port, ck, 60), b.setup.remote(spec, 1, 2, "127.0.0.1", port, ck, 60)])
    two = get([a.chunk.remote(3, 3, 8, 3e-3, None), b.chunk.remote(3, 3, 8, 3e-3, None)])[0]["loss"]
    get([a.teardown.remote(), b.teardown.remote()])
    assert two == pytest.approx(one, rel=1e-4)


def test_user_scripts_and_a_model_job_train_elastically_and_survive_a_preemption(pool, tmp_path):
    # issue 22: the user's own script (examples/byo/train.py, gpuwise.elastic) and a model + data job
    # (the bundled transformers trainer) on the slots; elastic DP moves them, one worker is killed;
    # a script without the API runs beside them as a rigid job
    pytest.importorskip("transformers")
    from pathlib import Path

    byo = Path(__file__).resolve().parents[1] / "examples" / "byo"
    rows = [{"name": "script", "time": "0", "num_gpus": "1", "entrypoint": "train.py --hidden 32 --seq-len 32",
             "steps": "150", "batch_size": "8", "min_batch": "4", "max_batch": "32"},
            {"name": "model", "time": "3", "num_gpus": "1", "model": "tiny-llama", "data": "data/shakespeare.txt",
             "steps": "80", "batch_size": "8", "min_batch": "4", "max_batch": "32"},
            {"name": "rigid", "time": "4", "num_gpus": "1", "steps": "10", "batch_size": "8",
             "entrypoint": str(Path(__file__).parent / "data" / "rigid_script.py")}]
    wl = jobs_from_rows(rows, "test", byo)
    out = execute(CLUSTER, wl, "elastic-dp", _opts(tmp_path, preempt_every_s=1.5, max_preemptions=1), pool=pool,
                  make=_elastic)
    # the message names each job's status and last events (a run seen once with 2 of 3 done under load)
    assert out["jobs_completed"] == 3, [(j["name"], j["status"], j["events"][-4:]) for j in out["jobs"]]
    rigid = out["jobs"].pop()                       # no gpuwise.elastic: run to its exit, said so
    assert "rigid" in rigid["trains"] and rigid["status"] == "done"
    for j in out["jobs"]:
        assert j["last_loss"] < j["first_loss"]
        runs = [e for e in j["events"] if e["kind"] in ("start", "rescale")]
        for e in runs[1:]:   # every restart after step 0 resumed from the checkpoint the controller recorded
            assert e["step"] == 0 or e["checkpoint"].endswith(f"step-{e['step']:07d}.pt")
        assert all(f["lost_steps"] <= K for f in j["events"] if f["kind"] == "fault")
        logs = tmp_path / "state" / "jobs" / j["name"] / "logs"
        assert "--- exit 0" in (logs / "rank0.log").read_text()   # stopped by the controller's "done"
    assert out["preemptions_injected"] == 1 and out["jct_median_error"] is not None, [j["events"] for j in out["jobs"]]
    print({j["name"]: [(e["kind"], e.get("gpus"), e.get("batch"), e.get("step")) for e in j["events"]] for j in out["jobs"]})
