"""What the job service's controller writes to the store, one transaction per step.

Every write that changes a job is conditional on the job still being active: a cancel another
request made meanwhile wins, and the caller drops the jobs whose write did not land (``gone``).
A job's recorded `state` is `status.SERVICE_STATE` of its control-loop status.
"""

from __future__ import annotations

import time

from sqlalchemy import bindparam, insert, or_, select, update

from gpuwise.control import status as st
from gpuwise.jobqueue import schema as s
from gpuwise.jobqueue.store import ACTIVE, Store
from gpuwise.policies.base import Allocation, Decision, JobState

J = s.jobs


def alloc_json(a: Allocation | None) -> dict | None:
    return None if a is None else {"gpu_type": a.gpu_type, "placement": [list(p) for p in a.placement],
                                   "gpus": a.num_gpus, "nodes": a.num_nodes, "batch_size": a.batch_size,
                                   "layout": a.layout}


def alloc_from_json(d: dict | None) -> Allocation | None:
    if not d:
        return None
    return Allocation(d["gpu_type"], tuple((int(i), int(g)) for i, g in d["placement"]), d.get("batch_size"),
                      d.get("layout"))


def event(conn, job_id: str, at_sim: float | None, kind: str, detail: dict | None = None) -> None:
    conn.execute(insert(s.events).values(job_id=job_id, at=time.time(), at_sim=at_sim, kind=kind, detail=detail))


def _cond(jid: str):
    return update(J).where(J.c.id == jid, J.c.state.in_(ACTIVE))


def fraction(js: JobState) -> float:
    return min(1.0, js.progress / js.target) if js.target > 0 else 1.0


def record_polled(store: Store, now: float, finished: list[JobState], failed: list[JobState],
                  confirmed: list[JobState], progress: list[JobState], why_failed: str) -> set[str]:
    """The clock, confirmed starts (before finishes: a job may do both in one step), finishes,
    failures and (``progress``) running jobs' progress; returns the ids no longer active."""
    gone: set[str] = set()
    with store.write() as conn:
        store.set_meta(conn, "clock", now)
        for js in confirmed:   # progress began at run_from
            if conn.execute(_cond(js.name).values(state=st.SERVICE_STATE[st.RUNNING], progress=fraction(js),
                                                  attained_gpu_s=js.attained_gpu_s,
                                                  measured_speed=js.measured_speed)).rowcount:
                event(conn, js.name, js.run_from, "running", {"progress": fraction(js)})
            else:
                gone.add(js.name)
        for js in finished:
            if not conn.execute(_cond(js.name).values(state=st.SERVICE_STATE[st.DONE], progress=1.0, finished_sim=now,
                                                      allocation=None, attained_gpu_s=js.attained_gpu_s,
                                                      measured_speed=js.measured_speed)).rowcount:
                gone.add(js.name)
                continue
            event(conn, js.name, now, "done", {"progress": 1.0})
        for js in failed:
            if conn.execute(_cond(js.name).values(state=st.SERVICE_STATE[st.FAILED], finished_sim=now, allocation=None,
                                                  message=why_failed)).rowcount:
                event(conn, js.name, now, "failed", alloc_json(js.allocation))
            else:
                gone.add(js.name)
        if progress:
            gone |= _write_progress(conn, progress)
    return gone


def _write_progress(conn, jobs: list[JobState]) -> set[str]:
    """Progress of running jobs in one statement (the restart point of the sim backend)."""
    bulk = [{"b_id": js.name, "b_p": fraction(js), "b_g": js.attained_gpu_s, "b_s": js.measured_speed}
            for js in jobs]
    active = or_(*(J.c.state == a for a in ACTIVE))      # no IN (...): executemany cannot expand it
    n = conn.execute(update(J).where(J.c.id == bindparam("b_id"), active).values(
        progress=bindparam("b_p"), attained_gpu_s=bindparam("b_g"), measured_speed=bindparam("b_s")),
        bulk).rowcount
    if n == len(bulk):
        return set()
    ids = [b["b_id"] for b in bulk]
    live = set(conn.execute(select(J.c.id).where(J.c.id.in_(ids), J.c.state.in_(ACTIVE))).scalars())
    return set(ids) - live


def record_decision(store: Store, now: float, d: Decision, jobs: dict[str, JobState],
                    restart_s: float) -> set[str]:
    """A round's refusals and allocation changes, before any is applied; returns the ids no longer
    active (not to be acted on)."""
    gone: set[str] = set()
    with store.write() as conn:
        for jid in d.drop:
            if conn.execute(_cond(jid).values(state=st.SERVICE_STATE[st.DROPPED], finished_sim=now,
                                              message="refused by the policy's admission")).rowcount:
                event(conn, jid, now, "refused")
            else:
                gone.add(jid)
        for jid, a in d.allocations.items():
            js = jobs[jid]
            if js.allocation == a:
                continue
            vals = dict(allocation=alloc_json(a), progress=fraction(js))
            if a is None:
                vals.update(state=st.SERVICE_STATE[st.PENDING], run_from=None)
            else:
                vals.update(state=st.SERVICE_STATE[st.STARTING], run_from=now + restart_s, restarts=js.restarts + 1)
                if js.allocation is None and js.restarts == 0:
                    vals["started_sim"] = now
            if not conn.execute(_cond(jid).values(**vals)).rowcount:
                gone.add(jid)
                continue
            event(conn, jid, now, "allocated" if a else "released", alloc_json(a) or alloc_json(js.allocation))
    return gone


def record_usage(store: Store, now: float, used: dict[str, int]) -> None:
    """GPUs in use per type (written when a level changes)."""
    with store.write() as conn:
        conn.execute(insert(s.usage), [{"at_sim": now, "gpu_type": t, "used": u} for t, u in used.items()])


def record_round_failure(store: Store, now: float, job_ids: list[str], error: str, consecutive: int) -> None:
    """A policy round that raised: an event on every job it was deciding for."""
    with store.write() as conn:
        for jid in job_ids:
            event(conn, jid, now, "round_failed", {"error": error, "consecutive": consecutive})


def record_node_lost(store: Store, now: float, lost: list[dict], hit: list[JobState]) -> set[str]:
    """A node whose machine died (the last of ``lost``; all of them are kept in the store's meta, so a
    restart does not bring them back) and the jobs that held GPUs there: queued again to restart
    elsewhere from their last checkpoint, a ``node-lost`` event each; returns the ids no longer active."""
    gone: set[str] = set()
    with store.write() as conn:
        store.set_meta(conn, "lost_nodes", lost)
        for js in hit:
            if conn.execute(_cond(js.name).values(state=st.SERVICE_STATE[st.PREEMPTED], allocation=None,
                                                  run_from=None, progress=fraction(js))).rowcount:
                event(conn, js.name, now, "node-lost", {**lost[-1], "was": alloc_json(js.allocation),
                                                        "resume_progress": fraction(js)})
            else:
                gone.add(js.name)
    return gone
