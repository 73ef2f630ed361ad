"""The job service's scheduler is the shared control loop (issue 20 item 3): in-process, real SQLite
store, real sim backend, real policies; the backend clock is moved by hand (a time scale of 1e-6
simulated seconds per wall second keeps it still between jumps).

- the policies' cadence holds in the service as in `gpuwise simulate` (elastic-dp: at most one
  round per ``min_interval_s``; rounds every ``period_s`` while jobs run, not every iteration);
- statuses are the control loop's `Status` members, recorded as the service's states;
- a round that raises is a job event and a health item (/v1/health, the dashboard), retried after
  a backoff, and the jobs are scheduled once it works again;
- Sia's solver outcomes reach the dashboard's data;
- a node lost (as the Ray backend reports it) leaves the book through the loop's ``lose_node``, its
  job is queued again, a job pinned to its GPU type fails naming it, and a restart keeps it lost.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("sqlalchemy")

from gpuwise.control import status as st  # noqa: E402
from gpuwise.hardware.cluster import make_cluster  # noqa: E402
from gpuwise.jobqueue.admission import admit  # noqa: E402
from gpuwise.jobqueue.backend import SimBackend  # noqa: E402
from gpuwise.jobqueue.scheduler import Scheduler  # noqa: E402
from gpuwise.jobqueue.store import Store  # noqa: E402
from gpuwise.plan.submit import spec_from_preset  # noqa: E402
from gpuwise.policies.fifo import Fifo  # noqa: E402
from gpuwise.policies.registry import make_policy  # noqa: E402

LONG = spec_from_preset("resnet18-cifar10", {"samples": 1e9}, 128)   # never finishes here


def _service(tmp_path, policy, gpus: int = 4, period_s: float = 0.01):
    cluster = make_cluster([("T4", 1, gpus)])
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    user, _ = store.create_token("ann")
    backend = SimBackend(cluster, time_scale=1e-6)
    sch = Scheduler(store, backend, policy, tmp_path / "specs", period_s=period_s)
    sch.restore()
    return sch, store, user, cluster


def _after_backoff(sch) -> None:
    time.sleep(max(0.0, sch._hold_until - time.monotonic()) + 0.01)


def _submit(sch, store, user, cluster, t: float) -> str:
    sch.backend.set_clock(t)
    return admit(store, cluster, user, LONG, clock=sch.backend.now).job["id"]


def _at(sch, t: float) -> None:
    sch.backend.set_clock(t)
    sch.round()


def test_elastic_dp_rounds_follow_its_min_interval_and_period(tmp_path):
    pol = make_policy("elastic-dp")
    assert (pol.min_interval_s, pol.period_s) == (60.0, 300.0)
    sch, store, user, cluster = _service(tmp_path, pol)
    a = _submit(sch, store, user, cluster, 0.0)
    _at(sch, 0.0)
    assert len(sch.loop.decision_s) == 1 and store.job(a)["state"] == "scheduled"
    b = _submit(sch, store, user, cluster, 10.0)
    for t in (10.0, 20.0, 59.0):          # an arrival, but within min_interval_s of the last round
        _at(sch, t)
    assert len(sch.loop.decision_s) == 1 and store.job(b)["state"] == "queued"
    _at(sch, 60.5)                         # the arrival's round, once the interval has passed
    assert len(sch.loop.decision_s) == 2 and store.job(b)["allocation"] is not None
    for t in (100.0, 200.0, 299.0):        # nothing happens: no round (the old service ran one each time)
        _at(sch, t)
    assert len(sch.loop.decision_s) == 2
    _at(sch, 360.5)                        # period_s after the last round: the periodic round
    assert len(sch.loop.decision_s) == 3
    assert sch.health.rounds == 3 and sch.health.to_json()["ok"]
    store.close()


def test_statuses_are_the_control_loops_and_recorded_as_service_states(tmp_path):
    sch, store, user, cluster = _service(tmp_path, make_policy("frenzy"))
    jid = _submit(sch, store, user, cluster, 0.0)
    _at(sch, 0.0)
    js = sch.jobs[jid]
    assert js.status is st.STARTING and store.job(jid)["state"] == st.SERVICE_STATE[st.STARTING] == "scheduled"
    _at(sch, sch.backend.restart_s + 1.0)          # the restart delay passed: the loop confirms it
    assert js.status is st.RUNNING and store.job(jid)["state"] == "running"
    assert [e["kind"] for e in store.events(jid)] == ["submitted", "allocated", "running"]
    sch._progress_written = 0.0                    # running jobs' progress is written at most once a second
    _at(sch, 1e5)
    p = store.job(jid)["progress"]
    assert 0 < p < 1 and p == pytest.approx(js.progress / js.target)
    assert sch.health.to_json()["ok"] and sch.health.rounds_failed == 0
    assert store.cancel(jid, sch.backend.now())
    _at(sch, 100.0)
    assert js.status is st.CANCELLED and jid not in sch.jobs and sch.state.used() == 0
    assert store.job(jid)["state"] == "cancelled"
    store.close()


class _Flaky(Fifo):
    """FIFO whose rounds raise while ``broken`` (a policy bug, or a store that cannot be written)."""

    broken = True

    def schedule(self, now, view, perf):
        if self.broken:
            raise RuntimeError("policy exploded")
        return super().schedule(now, view, perf)


def test_a_failing_round_is_a_job_event_and_a_health_item_then_retried(tmp_path):
    from fastapi.testclient import TestClient

    from gpuwise.service.app import create_app
    from gpuwise.service.dashboard import render

    pol = _Flaky()
    sch, store, user, cluster = _service(tmp_path, pol, period_s=0.1)   # backoffs 0.2 s, 0.4 s
    jid = _submit(sch, store, user, cluster, 0.0)
    _at(sch, 0.0)
    h = sch.health.to_json()
    assert not h["ok"] and h["consecutive_failures"] == 1 and "policy exploded" in h["last_error"]
    assert [e["kind"] for e in store.events(jid)] == ["submitted", "round_failed"]
    assert "policy exploded" in store.events(jid)[-1]["detail"]["error"]
    _at(sch, 1.0)                                   # within the backoff: not retried yet
    assert sch.health.consecutive_failures == 1
    with TestClient(create_app(store, sch, run_scheduler=False)) as client:
        body = client.get("/v1/health").json()
    assert body["ok"] is False and body["scheduler"]["last_error"] == h["last_error"]
    page = render("ann", store.jobs(), [], [], sch.snapshot(), {user.id: "ann"})
    assert "scheduling rounds failing (1 in a row): RuntimeError: policy exploded" in page
    _after_backoff(sch)
    _at(sch, 2.0)                                   # retried after the backoff, still failing: one event only
    assert sch.health.consecutive_failures == 2 and sch.health.rounds_failed == 2
    assert [e["kind"] for e in store.events(jid)].count("round_failed") == 1
    pol.broken = False
    _after_backoff(sch)
    _at(sch, 3.0)
    assert sch.health.to_json()["ok"] and store.job(jid)["state"] == "scheduled"
    store.close()


def test_sia_solver_outcomes_reach_the_dashboard_data(tmp_path):
    from gpuwise.service.dashboard import render

    sch, store, user, cluster = _service(tmp_path, make_policy("sia"))
    _submit(sch, store, user, cluster, 0.0)
    _at(sch, 0.0)
    snap = sch.snapshot()
    assert snap["solver"]["rounds"] == 1 and snap["solver"]["by_status"] == {"optimal": 1}
    assert "sia: 1 HiGHS solves (1 optimal)" in render("ann", store.jobs(), [], [], snap, {user.id: "ann"})
    store.close()


def test_a_lost_node_shrinks_the_book_requeues_its_job_and_stays_lost_after_a_restart(tmp_path):
    """The scheduler's half of a node loss (the Ray half, with a real dying node: test_service_node_loss):
    the sim backend reports node 0 lost as the Ray backend does (``lost_nodes``)."""
    from gpuwise.errors import InputError
    from gpuwise.jobqueue.admission import prepare

    v100 = "V100-16GB-SXM2"
    cluster = make_cluster([(v100, 1, 4), ("T4", 1, 4)])
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    user, _ = store.create_token("ann")

    def scheduler():
        sch = Scheduler(store, SimBackend(cluster, time_scale=1e-6), Fifo(), tmp_path / "specs", period_s=0.01)
        sch.restore()
        return sch

    sch = scheduler()
    pinned = LONG.model_copy(update={"constraints": LONG.constraints.model_copy(update={"gpus": ["V100"]})})
    ids = [admit(store, cluster, user, s, clock=sch.backend.now).job["id"] for s in (LONG, LONG, pinned)]
    _at(sch, 1.0)
    on, off, waiting = ids
    assert store.job(on)["allocation"]["placement"] == [[0, 4]] and store.job(off)["allocation"]["placement"] == [[1, 4]]
    sch.backend.lost_nodes.append((2.0, 0))
    _at(sch, 2.0)
    _at(sch, 3.0)
    assert store.job(on)["state"] == "queued" and store.job(on)["allocation"] is None
    ev = store.events(on)[-1]
    assert ev["kind"] == "node-lost" and ev["detail"]["name"] == f"{v100}-0" and ev["detail"]["was"]["gpus"] == 4
    assert [e["kind"] for e in store.events(off)] == ["submitted", "allocated"]   # untouched (still starting)
    assert store.job(off)["allocation"]["placement"] == [[1, 4]]
    row = store.job(waiting)
    assert row["state"] == "failed" and f"no {v100} GPUs remain" in row["message"] and f"{v100}-0" in row["message"]
    snap = sch.snapshot()
    assert {g["gpu"]: g["total"] for g in snap["gpu_types"]} == {v100: 0, "T4": 4}
    assert snap["capacity"]["gpus"] == 4 and snap["capacity"]["lost_gpus"] == 4 and snap["nodes"][0]["lost"]
    assert all(i != 0 for js in sch.loop.running.values() for i, _ in js.allocation.placement)
    sch = scheduler()                          # a restart on the same store: node 0 stays lost
    assert [d["node"] for d in sch.capacity()["lost_nodes"]] == [0]
    assert sch.state.capacity_by_type() == {v100: 0, "T4": 4} and off in sch.loop.running and on in sch.loop.pending
    alive, lost = sch.surviving()
    assert alive.total_gpus == 4 and f"{v100}-0" in lost and "4 of 8 GPUs remain" in lost
    with pytest.raises(InputError) as refused:   # only the lost node had its GPU type: refused, naming it
        prepare(alive, user, pinned, check=sch.backend.check, lost=lost)
    assert refused.value.field == "constraints.gpus" and f"lost: node {v100}-0" in str(refused.value)
    store.close()
