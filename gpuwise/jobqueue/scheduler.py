"""The scheduler loop: store -> policy -> store -> backend, one round at a time.

A round (1) picks up jobs submitted and cancelled since the last one, (2) brings running jobs'
progress up to date and finds the finished ones, (3) asks the policy for a decision on the jobs
each user's GPU quota admits, (4) writes everything -- clock, progress, finishes, allocation changes,
GPU usage -- in ONE transaction, and only then (5) applies it in memory and tells the backend. A
change another request made meanwhile (a cancel) wins: allocation writes are conditional on the
job still being active, and a job whose write did not land is not acted on.

Restart: `restore` rebuilds the jobs from the store, puts running ones back on the GPUs they held
(recorded progress, a `resumed` event, the restart cost of the backend) and continues the clock
where it was recorded, under the policy recorded at first start.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import insert, select, update

from gpuwise.errors import InputError
from gpuwise.jobqueue import schema as s
from gpuwise.jobqueue.backend import Backend
from gpuwise.jobqueue.store import ACTIVE, Store
from gpuwise.policies.base import Allocation, ClusterState, Decision, JobState, Policy, SchedView


def alloc_json(a: Allocation | None) -> dict | None:
    return None if a is None else {"gpu_type": a.gpu_type, "placement": [list(p) for p in a.placement],
                                   "gpus": a.num_gpus, "nodes": a.num_nodes, "batch_size": a.batch_size}


def alloc_from_json(d: dict | None) -> Allocation | None:
    if not d:
        return None
    return Allocation(d["gpu_type"], tuple((int(i), int(g)) for i, g in d["placement"]), d.get("batch_size"))


@dataclass
class RoundStats:
    rounds: int = 0
    last_round_s: float = 0.0
    round_s: list[float] = field(default_factory=list)


def _trim(a: Allocation, n: int) -> Allocation:
    """The first ``n`` GPUs of a placement (a grant cut down to a quota)."""
    out, left = [], n
    for node, g in a.placement:
        if left <= 0:
            break
        out.append((node, min(g, left)))
        left -= min(g, left)
    return Allocation(a.gpu_type, tuple(out), a.batch_size)


class Scheduler:
    """Owns the in-memory view of active jobs; the store owns the truth."""

    def __init__(self, store: Store, backend: Backend, policy: Policy, spec_dir: Path,
                 period_s: float = 0.2) -> None:
        self.store, self.backend, self.policy = store, backend, policy
        self.spec_dir = Path(spec_dir)
        self.spec_dir.mkdir(parents=True, exist_ok=True)
        self.period_s = float(period_s)
        self.progress_every_s = max(1.0, self.period_s)   # running jobs' progress is recorded this often
        self._progress_written = 0.0
        self.state = ClusterState(backend.cluster)
        self.jobs: dict[str, JobState] = {}        # active jobs by id, arrival order
        self.phase: dict[str, str] = {}            # id -> queued | scheduled | running (as recorded)
        self.user_of: dict[str, int] = {}
        self.max_gpus: dict[str, int] = {}
        self.last_seq = 0
        self.last_event = 0
        self.stats = RoundStats()
        self._new: list[str] = []
        self._dirty = True
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- loading ------------------------------------------------------------------------------
    def _spec_path(self, row: dict) -> str:
        """Job-spec YAML for the simulator's per-spec model cache (content-addressed, derived from
        the store; identical specs share one model)."""
        import yaml

        p = self.spec_dir / f"{row['spec_key']}.yaml"
        if not p.exists():
            tmp = p.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_text(yaml.safe_dump(row["spec"], sort_keys=True))
            tmp.replace(p)
        return str(p)

    def _state_of(self, row: dict) -> JobState:
        tj = self.backend.trace_job(row, self._spec_path(row))
        target = self.backend.perf.target(tj)
        js = JobState(job=tj, submitted_s=tj.arrival_s, target=target,
                      progress=row["progress"] * target, attained_gpu_s=row["attained_gpu_s"],
                      restarts=row["restarts"], last_update=self.backend.now())
        self.user_of[row["id"]] = row["user_id"]
        self.max_gpus[row["id"]] = row["max_gpus"]
        return js

    def restore(self) -> list[str]:
        """Rebuild from the store after a (re)start; returns the ids of resumed running jobs."""
        recorded = self.store.meta("policy")
        if recorded and recorded != self.policy.name:
            raise InputError("--policy", self.policy.name, f"this store was scheduled by {recorded}; restart "
                             f"with --policy {recorded} (or use a new --db)")
        ran = self.store.meta("backend")
        if ran and ran != self.backend.name and self.store.jobs(states=ACTIVE, limit=1):
            raise InputError("--backend", self.backend.name, f"this store's active jobs were admitted by the {ran} "
                             f"backend; restart with --backend {ran} (or use a new --db)")
        held = self.store.meta("cluster")
        here = [[n.node_id, n.gpu, n.gpus] for n in self.backend.cluster.nodes]
        if held and held != here and self.store.jobs(states=("scheduled", "running"), limit=1):
            raise InputError("--cluster", self.backend.cluster.name, "running jobs in this store hold GPUs of "
                             "another cluster; restart with the cluster they were scheduled on")
        clock = float(self.store.meta("clock", 0.0) or 0.0)
        self.backend.set_clock(clock)
        with self.store.read() as conn:
            self.last_event = conn.execute(select(s.events.c.id).order_by(s.events.c.id.desc()).limit(1)).scalar() or 0
        rows = self.store.jobs(states=ACTIVE, newest_first=False)
        resumed = []
        now = self.backend.now()
        with self.store.write() as conn:
            self.store.set_meta(conn, "policy", self.policy.name)
            self.store.set_meta(conn, "backend", self.backend.name)
            self.store.set_meta(conn, "cluster", here)
            for row in rows:
                a = alloc_from_json(row["allocation"])
                if a is not None:
                    conn.execute(insert(s.events).values(job_id=row["id"], at=time.time(), at_sim=now,
                                                         kind="resumed", detail={**alloc_json(a),
                                                                                 "progress": row["progress"]}))
                    conn.execute(update(s.jobs).where(s.jobs.c.id == row["id"]).values(
                        state="scheduled", restarts=row["restarts"] + 1))
        for row in rows:
            js = self._state_of(row)
            self.jobs[row["id"]] = js
            self.last_seq = max(self.last_seq, row["seq"])
            a = alloc_from_json(row["allocation"])
            if a is None:
                self.phase[row["id"]] = "queued"
                continue
            self.state.allocate(a)
            js.allocation, js.status, js.restarts = a, "running", js.restarts + 1
            self.backend.launch(js, a, now)
            self.phase[row["id"]] = "scheduled"
            resumed.append(row["id"])
        with self.store.read() as conn:
            top = conn.execute(select(s.jobs.c.seq).order_by(s.jobs.c.seq.desc()).limit(1)).scalar()
        self.last_seq = max(self.last_seq, top or 0)
        return resumed

    def _pick_up(self) -> None:
        """New submissions and cancellations since the last round."""
        with self.store.read() as conn:
            new = conn.execute(select(s.jobs).where(s.jobs.c.seq > self.last_seq).order_by(s.jobs.c.seq)).mappings().all()
            cancels = conn.execute(select(s.events.c.id, s.events.c.job_id).where(
                s.events.c.id > self.last_event, s.events.c.kind == "cancelled").order_by(s.events.c.id)).all()
            top = conn.execute(select(s.events.c.id).order_by(s.events.c.id.desc()).limit(1)).scalar()
        for row in new:
            self.last_seq = max(self.last_seq, row["seq"])
            if row["state"] in ACTIVE and row["id"] not in self.jobs:
                self.jobs[row["id"]] = self._state_of(dict(row))
                self.phase[row["id"]] = "queued"
                self._new.append(row["id"])
                self._dirty = True
        # a cancel whose event this misses (databases that commit ids out of order) is still caught:
        # every write of a round is conditional on the job being active, and a miss drops the job
        self.last_event = max(self.last_event, top or 0)
        for _, job_id in cancels:
            self._drop(job_id)

    def _drop(self, job_id: str) -> None:
        js = self.jobs.pop(job_id, None)
        if js is None:
            return
        if js.allocation is not None:
            self.backend.stop(js, self.backend.now())
            self.state.release(js.allocation)
            js.allocation = None
        self.phase.pop(job_id, None)
        self._dirty = True

    # -- one round ----------------------------------------------------------------------------
    def _used_by_user(self, skip=()) -> dict[int, int]:
        used: dict[int, int] = {}
        for jid, js in self.jobs.items():
            if js.allocation is not None and jid not in skip:
                used[self.user_of[jid]] = used.get(self.user_of[jid], 0) + js.allocation.num_gpus
        return used

    def _decide(self, now: float) -> Decision:
        """The policy's decision over the jobs the users' quotas admit, less any grant that would
        take a user over quota or a job over its max_gpus (those wait for a later round)."""
        users = self.store.users()
        used = self._used_by_user()
        pending, asked = {}, dict(used)
        for j, js in self.jobs.items():     # per user, only the queued jobs its remaining quota can hold
            u = self.user_of[j]
            room = (users[u].quota_gpus or 1 << 30) - asked.get(u, 0)
            if js.allocation is None and room >= 1:
                pending[j] = js
                asked[u] = asked.get(u, 0) + min(js.job.num_gpus, room)
        running = {j: js for j, js in self.jobs.items() if js.allocation is not None}
        view = SchedView(pending, running, self.state, [j for j in self._new if j in pending])
        self._new = [j for j in self._new if j not in pending]
        d = self.policy.schedule(now, view, self.backend.perf)
        changed = {j for j in d.allocations if j in self.jobs}
        held = self._used_by_user(skip=changed)
        keep: dict[str, Allocation | None] = {}
        for jid in sorted(changed, key=lambda j: d.allocations[j] is not None):   # releases first
            a, u = d.allocations[jid], self.user_of[jid]
            if a is not None:
                quota = users[u].quota_gpus or 1 << 30
                room = min(self.max_gpus[jid], quota - held.get(u, 0))
                if a.num_gpus > room:
                    cur = self.jobs[jid].allocation
                    if cur is None and room >= 1:      # a new job: the same placement, trimmed
                        a = _trim(a, room)
                    else:
                        if cur is not None:
                            held[u] = held.get(u, 0) + cur.num_gpus
                        continue
                held[u] = held.get(u, 0) + a.num_gpus
            keep[jid] = a
        return Decision(self._fit(keep), [j for j in d.drop if j in self.jobs])

    def _fit(self, keep: dict[str, Allocation | None]) -> dict[str, Allocation | None]:
        """Drop grants that no longer fit once some changes were held back (a held-back move keeps
        its old GPUs); a job that can keep neither is stopped."""
        st = self.state.copy()
        for jid in keep:
            if self.jobs[jid].allocation is not None:
                st.release(self.jobs[jid].allocation)
        out: dict[str, Allocation | None] = {}
        for jid, a in keep.items():
            for cand in (a, self.jobs[jid].allocation):
                if cand is None:
                    out[jid] = None
                    break
                try:
                    st.allocate(cand)
                except ValueError:
                    continue
                if cand == a:
                    out[jid] = a
                break
            else:
                out[jid] = None
        return out

    def round(self) -> None:
        """One round (see the module docstring); safe to call from one thread at a time."""
        t0 = time.perf_counter()
        with self._lock:
            self._pick_up()
            now = self.backend.now()
            self.backend.tick(now)
            finished, failed = [], []
            for jid, js in self.jobs.items():
                if js.allocation is not None:
                    self.backend.poll(js, now)
                    if js.progress >= js.target * (1 - 1e-9):
                        finished.append(jid)
                    elif js.status == "failed":     # the backend gave up on it (e.g. workers faulting)
                        failed.append(jid)
            if failed:
                self._fail(now, failed)
            for jid in finished:      # release before deciding, so the policy can reuse the GPUs
                self.state.release(self.jobs[jid].allocation)
            started = [j for j, p in self.phase.items() if p == "scheduled" and self.jobs[j].run_from <= now]
            decision = Decision()
            if self._dirty or finished or self.policy.period_s:
                saved = {j: self.jobs[j].allocation for j in finished}
                for j in finished:
                    self.jobs[j].allocation = None
                    self.jobs[j].status = "done"
                live = {j: js for j, js in self.jobs.items() if j not in finished}
                all_jobs, self.jobs = self.jobs, live
                try:
                    decision = self._decide(now)
                finally:
                    self.jobs = all_jobs
                    for j, a in saved.items():
                        self.jobs[j].allocation = a
                self._dirty = False
            gone = self._record(now, finished, started, decision)
            self._apply(now, finished, started, decision, gone)
        dt = time.perf_counter() - t0
        self.stats.rounds += 1
        self.stats.last_round_s = dt
        self.stats.round_s.append(dt)
        del self.stats.round_s[:-1000]

    def _fail(self, now: float, failed: list[str]) -> None:
        """Record jobs the backend failed (terminal), then release their GPUs."""
        J = s.jobs
        why = f"the {self.backend.name} backend could not keep it running (see its events)"
        with self.store.write() as conn:
            for jid in failed:
                if conn.execute(update(J).where(J.c.id == jid, J.c.state.in_(ACTIVE)).values(
                        state="failed", finished_sim=now, allocation=None, message=why)).rowcount:
                    conn.execute(insert(s.events).values(job_id=jid, at=time.time(), at_sim=now, kind="failed",
                                                         detail=alloc_json(self.jobs[jid].allocation)))
        for jid in failed:
            self._drop(jid)

    def _record(self, now: float, finished: list[str], started: list[str], d: Decision) -> set[str]:
        """Write the round; returns jobs whose conditional write found them no longer active."""
        gone: set[str] = set()
        wall = time.time()
        J = s.jobs

        def cond(jid):
            return update(J).where(J.c.id == jid, J.c.state.in_(ACTIVE))

        with self.store.write() as conn:
            self.store.set_meta(conn, "clock", now)
            bulk = []
            flush = time.monotonic() - self._progress_written >= self.progress_every_s
            for jid, js in self.jobs.items():
                if js.allocation is None:
                    continue
                vals = dict(progress=min(1.0, js.progress / js.target), attained_gpu_s=js.attained_gpu_s,
                            measured_speed=js.measured_speed)
                if jid not in finished and jid not in started:
                    if flush:
                        bulk.append({"b_id": jid, "b_p": vals["progress"], "b_g": js.attained_gpu_s,
                                     "b_s": js.measured_speed})
                    continue
                if jid in finished:
                    vals.update(state="done", progress=1.0, finished_sim=now, allocation=None)
                elif jid in started:
                    vals.update(state="running")
                if conn.execute(cond(jid).values(**vals)).rowcount == 0:
                    gone.add(jid)
                    continue
                if jid in started:    # progress began at run_from (maybe finished within this round)
                    conn.execute(insert(s.events).values(job_id=jid, at=wall, at_sim=js.run_from, kind="running",
                                                         detail=None if jid in finished else {"progress": vals["progress"]}))
                if jid in finished:
                    conn.execute(insert(s.events).values(job_id=jid, at=wall, at_sim=now, kind="done",
                                                         detail={"progress": 1.0}))
            if bulk:
                gone |= self._write_progress(conn, bulk)
            for jid in d.drop:
                if conn.execute(cond(jid).values(state="failed", finished_sim=now,
                                                 message="refused by the policy's admission")).rowcount:
                    conn.execute(insert(s.events).values(job_id=jid, at=wall, at_sim=now, kind="refused", detail=None))
                else:
                    gone.add(jid)
            for jid, a in d.allocations.items():
                js = self.jobs[jid]
                if js.allocation == a or jid in gone:
                    continue
                vals = dict(allocation=alloc_json(a), progress=min(1.0, js.progress / js.target))
                if a is None:
                    vals.update(state="queued", run_from=None)
                else:
                    vals.update(state="scheduled", run_from=now + getattr(self.backend, "restart_s", 0.0),
                                restarts=js.restarts + 1)
                    if js.allocation is None and self.phase.get(jid) == "queued" and js.restarts == 0:
                        vals["started_sim"] = now
                if conn.execute(cond(jid).values(**vals)).rowcount == 0:
                    gone.add(jid)
                    continue
                conn.execute(insert(s.events).values(job_id=jid, at=wall, at_sim=now,
                                                     kind="allocated" if a else "released",
                                                     detail=alloc_json(a) or alloc_json(js.allocation)))
            self._record_usage(conn, now, finished, d, gone)
        return gone

    def _write_progress(self, conn, bulk: list[dict]) -> set[str]:
        """Progress of running jobs in one statement (the restart point of the sim backend);
        returns jobs no longer active (cancelled meanwhile)."""
        from sqlalchemy import bindparam

        J = s.jobs
        active = (J.c.state == "queued") | (J.c.state == "scheduled") | (J.c.state == "running")
        n = conn.execute(update(J).where(J.c.id == bindparam("b_id"), active).values(
            progress=bindparam("b_p"), attained_gpu_s=bindparam("b_g"), measured_speed=bindparam("b_s")),
            bulk).rowcount
        self._progress_written = time.monotonic()
        if n == len(bulk):
            return set()
        ids = [b["b_id"] for b in bulk]
        live = set(conn.execute(select(J.c.id).where(J.c.id.in_(ids), J.c.state.in_(ACTIVE))).scalars())
        return set(ids) - live

    def _record_usage(self, conn, now: float, finished: list[str], d: Decision, gone: set[str]) -> None:
        """GPUs in use per type after this round, written when a type's level changes."""
        after = {t: 0 for t in self.backend.cluster.gpu_types}
        for jid, js in self.jobs.items():
            a = d.allocations.get(jid, js.allocation) if jid not in gone else None
            if jid in finished or a is None:
                continue
            after[a.gpu_type] += a.num_gpus
        last = getattr(self, "_usage", None)
        if last != after:
            conn.execute(insert(s.usage), [{"at_sim": now, "gpu_type": t, "used": u} for t, u in after.items()])
            self._usage = after

    def _apply(self, now: float, finished: list[str], started: list[str], d: Decision, gone: set[str]) -> None:
        for jid in finished:
            if jid in gone:      # cancelled meanwhile: its GPUs were released above
                self.jobs[jid].allocation = None
            self.jobs.pop(jid, None)
            self.phase.pop(jid, None)
            self._dirty = True
        for jid in gone:
            self._drop(jid)
        for jid in started:
            if jid in self.phase:
                self.phase[jid] = "running"
        for jid in d.drop:
            if jid not in gone:
                self.jobs.pop(jid, None)
                self.phase.pop(jid, None)
        changes = [(jid, a) for jid, a in d.allocations.items()
                   if jid in self.jobs and jid not in gone and self.jobs[jid].allocation != a]
        for jid, _ in changes:                    # releases before grows
            js = self.jobs[jid]
            if js.allocation is not None:
                self.backend.stop(js, now)
                self.state.release(js.allocation)
                js.allocation = None
        for jid, a in changes:
            js = self.jobs[jid]
            if a is None:
                self.phase[jid] = "queued"
                js.status = "pending"
                continue
            self.state.allocate(a)
            js.allocation, js.status = a, "running"
            js.restarts += 1
            self.backend.launch(js, a, now)
            self.phase[jid] = "scheduled"
            self._dirty = True

    # -- the loop -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpuwise-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import logging

        log = logging.getLogger("gpuwise.scheduler")
        while not self._stop.is_set():
            try:
                self.round()
            except Exception:  # keep scheduling; the store is the truth, the next round re-reads it
                log.exception("scheduler round failed")
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def snapshot(self) -> dict:
        """Cluster view for the API: GPUs per type, free and used, and the clock."""
        with self._lock:
            free = self.state.free_by_type()
            cap = self.state.capacity_by_type()
            return {"name": self.backend.cluster.name, "backend": self.backend.name, "policy": self.policy.name,
                    "clock_s": self.backend.now(), "describe": self.backend.cluster.describe(),
                    "gpu_types": [{"gpu": t, "total": cap[t], "free": free[t], "used": cap[t] - free[t]}
                                  for t in cap],
                    "nodes": [{"index": i, "node": n.node_id, "gpu": n.gpu, "gpus": n.gpus,
                               "free": self.state.free[i]} for i, n in enumerate(self.backend.cluster.nodes)],
                    "active_jobs": len(self.jobs), "backend_notes": self.backend.describe(),
                    "last_round_s": self.stats.last_round_s, "rounds": self.stats.rounds}


def open_queue(db: str | None, cluster, backend: str = "sim", policy: str | None = None,
               time_scale: float = 60.0, period_s: float = 0.2, ray_address: str | None = None) -> Scheduler:
    """Store + backend + policy, restored from the store (a restart resumes where it stopped).
    ``policy`` None: the one recorded in the store, else frenzy. The Ray backend keeps its runtime
    state (checkpoints) in ``ray-state/`` next to the store."""
    from gpuwise.jobqueue.backend import make_backend
    from gpuwise.jobqueue.store import Store
    from gpuwise.policies.registry import make_policy

    store = Store(db)
    pol = make_policy(policy or store.meta("policy") or "frenzy")
    if store.url.startswith("sqlite:///") and store.url != "sqlite:///:memory:":
        home = Path(store.url.removeprefix("sqlite:///")).parent
    else:
        from gpuwise.jobqueue.store import default_url

        home = Path(default_url().removeprefix("sqlite:///")).parent
    be = make_backend(backend, cluster, time_scale, state_dir=home / "ray-state", address=ray_address)
    try:
        sch = Scheduler(store, be, pol, home / "specs", period_s)
        sch.restore()
    except BaseException:
        be.close()
        raise
    return sch
