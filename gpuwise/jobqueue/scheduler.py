"""The job service's controller: the shared `ControlLoop` with the store and a backend around it.

The loop (gpuwise/control/loop.py, the one `gpuwise simulate` and `gpuwise run` use) owns the
pending/running jobs, the reservation book and the policy's cadence: a round after arrivals,
completions and cancels, no more often than the policy's ``min_interval_s``, and every ``period_s``
while jobs run. This module is its service half:

- its `Clock`: the backend's clock (simulated time, or wall-clock seconds for Ray), woken by the
  scheduler thread every ``period_s`` wall seconds;
- its `Actuator`: the backend (`SimBackend`, `RayBackend`): a start reserves the GPUs (status
  starting, "scheduled" to users) and the loop confirms it once the backend reports progress
  running from ``run_from`` (status running); a start the backend raises on is rolled back;
- its `Gate`: users' quotas (`quota.Quotas`) and the store: a round's decision is recorded in ONE
  transaction before anything is applied, every write conditional on the job still being active,
  so a cancel made meanwhile wins (gpuwise/jobqueue/record.py).

Each thread iteration (`round`) picks up submissions and cancels, brings running jobs' progress up
to date, records finishes, failures and confirmed starts, then runs the rounds that are due. A
round that raises is a job event (``round_failed``, on the jobs it was deciding for) and a health
item (`health`, shown by /v1/health and the dashboard); it is retried with a backoff that doubles
up to ``MAX_BACKOFF_S``, never silently.

A node whose machine died (the Ray backend's ``lost_nodes``) goes through the loop's ``lose_node``,
as under `gpuwise run`: its GPUs leave the book (policies, quotas, /v1/cluster, /v1/health and the
dashboard see the smaller cluster), the jobs that held GPUs there are queued again with a
``node-lost`` event and restart elsewhere from their last checkpoint, and a new job is admitted
against the surviving nodes (`surviving`). Lost nodes are kept in the store: a restart does not
bring them back.

Restart: `restore` rebuilds the jobs from the store, puts running ones back on the GPUs they held
(recorded progress, a `resumed` event, the restart cost of the backend) and continues the clock
where it was recorded, under the policy recorded at first start.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, update

from gpuwise.control import status as st
from gpuwise.control.loop import ControlLoop, lost_node
from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec, surviving
from gpuwise.jobqueue import record as rec
from gpuwise.jobqueue import schema as s
from gpuwise.jobqueue.backend import Backend
from gpuwise.jobqueue.quota import Quotas
from gpuwise.jobqueue.store import ACTIVE, Store
from gpuwise.policies.base import Allocation, Decision, JobState, Policy
from gpuwise.runtime.clock import WallClock

MAX_BACKOFF_S = 30.0     # wall seconds between retries of a failing round, at most
log = logging.getLogger("gpuwise.scheduler")


@dataclass
class Health:
    """The controller's rounds: how many ran, and the failures (reported, then retried)."""

    rounds: int = 0
    last_round_s: float = 0.0
    rounds_failed: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    last_failure_at: float | None = None      # backend clock
    failing: str | None = None                # "round" (the policy call or its recording) or "poll"

    def recovered(self, where: str) -> None:
        if self.failing == where:
            self.consecutive_failures, self.failing = 0, None

    def to_json(self) -> dict:
        return {"ok": self.consecutive_failures == 0, "rounds": self.rounds, "last_round_s": self.last_round_s,
                "rounds_failed": self.rounds_failed, "consecutive_failures": self.consecutive_failures,
                "last_error": self.last_error, "last_failure_at": self.last_failure_at}


class _BackendClock(WallClock):
    """The loop's `Clock`: the backend's time, with the wake-ups the scheduler thread fires."""

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend

    def now(self) -> float:
        return self.backend.now()


class _Actuator:
    """The loop's `Actuator`: the backend, with a start it raises on rolled back and recorded."""

    def __init__(self, backend: Backend, store: Store) -> None:
        self.backend, self.store = backend, store
        self.loop: ControlLoop | None = None

    def advance(self, js: JobState, now: float) -> None:
        self.backend.poll(js, now)

    def stop(self, js: JobState, now: float) -> None:
        self.backend.stop(js, now)

    def start(self, js: JobState, alloc: Allocation, now: float) -> None:
        """Reserved and recorded: the backend starts it; confirmed once progress runs (`Scheduler._poll`)."""
        js.status = st.STARTING
        try:
            self.backend.launch(js, alloc, now)
        except Exception as exc:   # the backend could not start it: the reservation goes back
            log.exception("starting %s failed", js.name)
            with self.store.write() as conn:
                rec.event(conn, js.name, now, "start_failed", {"error": f"{type(exc).__name__}: {exc}"})
                conn.execute(update(s.jobs).where(s.jobs.c.id == js.name, s.jobs.c.state.in_(ACTIVE)).values(
                    state=st.SERVICE_STATE[st.PENDING], allocation=None, run_from=None))
            self.loop.roll_back(js, now, str(exc))


class Scheduler:
    """The service's `ControlLoop`, its store and its backend; the store owns the truth."""

    def __init__(self, store: Store, backend: Backend, policy: Policy, spec_dir: Path,
                 period_s: float = 0.2) -> None:
        self.store, self.backend, self.policy = store, backend, policy
        self.spec_dir = Path(spec_dir)
        self.spec_dir.mkdir(parents=True, exist_ok=True)
        self.period_s = float(period_s)
        self.progress_every_s = max(1.0, self.period_s)   # running jobs' progress is recorded this often
        self._progress_written = 0.0
        self.clock = _BackendClock(backend)
        self.quotas = Quotas({}, {}, lambda u: self._users[u].quota_gpus)
        self.actuator = _Actuator(backend, store)
        self.loop = self.actuator.loop = ControlLoop(backend.cluster, policy, backend.perf, self.clock,
                                                     self.actuator, gate=self)
        self.last_seq = 0
        self.last_event = 0
        self.health = Health()
        self._users: dict = {}
        self._gone: set[str] = set()
        self._usage: dict[str, int] | None = None
        self._lost_seen = 0                       # backend.lost_nodes already applied (`_lose_nodes`)
        self._hold_until = 0.0                    # monotonic: no round before (backoff after a failure)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def state(self):
        return self.loop.state

    @property
    def jobs(self) -> dict[str, JobState]:
        """Active jobs by id (holding GPUs first, then waiting)."""
        return {**self.loop.running, **self.loop.pending}

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
        self.quotas.user_of[row["id"]] = row["user_id"]
        self.quotas.max_gpus[row["id"]] = row["max_gpus"]
        return js

    def _check_restore(self) -> list:
        """The store was scheduled by this policy, backend and cluster (else bad input)."""
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
        return here

    def restore(self) -> list[str]:
        """Rebuild from the store after a (re)start; returns the ids of resumed running jobs."""
        here = self._check_restore()
        lost = recorded_lost(self.store, self.backend.cluster)    # before the cluster is recorded again
        self.backend.set_clock(float(self.store.meta("clock", 0.0) or 0.0))
        with self.store.read() as conn:
            self.last_event = conn.execute(select(s.events.c.id).order_by(s.events.c.id.desc()).limit(1)).scalar() or 0
        rows = self.store.jobs(states=ACTIVE, newest_first=False)
        now = self.backend.now()
        with self.store.write() as conn:
            self.store.set_meta(conn, "policy", self.policy.name)
            self.store.set_meta(conn, "backend", self.backend.name)
            self.store.set_meta(conn, "cluster", here)
            self.store.set_meta(conn, "lost_nodes", lost)
            for row in rows:
                a = rec.alloc_from_json(row["allocation"])
                if a is not None:
                    rec.event(conn, row["id"], now, "resumed", {**rec.alloc_json(a), "progress": row["progress"]})
                    conn.execute(update(s.jobs).where(s.jobs.c.id == row["id"]).values(
                        state=st.SERVICE_STATE[st.STARTING], restarts=row["restarts"] + 1))
        for d in lost:     # gone before this start: out of the book before any job is put back
            self.loop.lose_node(d["node"], d["t"])
        resumed = []
        self._users = self.store.users()
        for row in rows:
            js = self._state_of(row)
            self.last_seq = max(self.last_seq, row["seq"])
            a = rec.alloc_from_json(row["allocation"])
            if a is None:
                self.loop.submit(js, now, new=False)
                continue
            js.restarts += 1
            self.loop.resume(js, a, now)
            resumed.append(row["id"])
        with self.store.read() as conn:
            top = conn.execute(select(s.jobs.c.seq).order_by(s.jobs.c.seq.desc()).limit(1)).scalar()
        self.last_seq = max(self.last_seq, top or 0)
        return resumed

    def _pick_up(self, now: float) -> None:
        """New submissions and cancellations since the last iteration."""
        with self.store.read() as conn:
            new = conn.execute(select(s.jobs).where(s.jobs.c.seq > self.last_seq).order_by(s.jobs.c.seq)).mappings().all()
            cancels = conn.execute(select(s.events.c.id, s.events.c.job_id).where(
                s.events.c.id > self.last_event, s.events.c.kind == "cancelled").order_by(s.events.c.id)).all()
            top = conn.execute(select(s.events.c.id).order_by(s.events.c.id.desc()).limit(1)).scalar()
        active = self.jobs
        if new:
            self._users = self.store.users()
        for row in new:
            self.last_seq = max(self.last_seq, row["seq"])
            if row["state"] in ACTIVE and row["id"] not in active:
                self.loop.submit(self._state_of(dict(row)), now)
        # a cancel whose event this misses (databases that commit ids out of order) is still caught:
        # every write is conditional on the job being active, and a miss drops the job
        self.last_event = max(self.last_event, top or 0)
        for _, job_id in cancels:
            self._drop(job_id, now)
        if new and self.loop.lost_nodes:   # admitted against the full cluster just before a loss
            self._strand(now)

    def _drop(self, job_id: str, now: float) -> None:
        js = self.jobs.get(job_id)
        if js is not None:
            self.loop.cancel(js, now)

    # -- the loop's Gate (quotas, then the store) --------------------------------------------------
    def admit(self, pending: dict[str, JobState]) -> dict[str, JobState]:
        self._users = self.store.users()
        return self.quotas.admit(pending, self.loop.running)

    def commit(self, now: float, decision: Decision) -> Decision:
        jobs = self.jobs
        d = self.quotas.trim(decision, jobs, self.loop.state)
        gone = rec.record_decision(self.store, now, d, jobs, getattr(self.backend, "restart_s", 0.0))
        self._gone |= gone
        return Decision({j: a for j, a in d.allocations.items() if j not in gone},
                        [j for j in d.drop if j not in gone])

    # -- one iteration ------------------------------------------------------------------------------
    def round(self) -> None:
        """One iteration (see the module docstring); safe to call from one thread at a time."""
        with self._lock:
            now = self.backend.now()
            self._pick_up(now)
            self.backend.tick(now)
            self._lose_nodes(now)
            self._poll(now)
            self.health.recovered("poll")
            self._run_due(now)
            self._record_usage(now)
            if len(self.loop.jobs) > 2 * (len(self.loop.running) + len(self.loop.pending)) + 100:
                self.loop.jobs = [js for js in self.loop.jobs if js.status not in st.TERMINAL]
        del self.loop.decision_s[:-1000]

    def _poll(self, now: float) -> None:
        """Progress up to ``now``; confirmed starts, finishes and failures recorded, then applied."""
        finished, failed, confirmed = [], [], []
        for js in list(self.loop.running.values()):
            self.backend.poll(js, now)
            if js.status in st.UNCONFIRMED and js.run_from <= now:
                confirmed.append(js)
            if js.progress >= js.target * (1 - 1e-9):
                finished.append(js)
            elif js.status == st.FAILED:     # the backend gave up on it (e.g. workers faulting)
                failed.append(js)
        flush = time.monotonic() - self._progress_written >= self.progress_every_s
        told = {js.name for js in finished + failed + confirmed}
        busy = [js for js in self.loop.running.values() if js.name not in told] if flush else []
        gone = rec.record_polled(self.store, now, finished, failed, confirmed, busy,
                                 f"the {self.backend.name} backend could not keep it running (see its events)")
        if flush:
            self._progress_written = time.monotonic()
        for js in confirmed:
            self.loop.confirm(js, now)
        for js in failed:
            self.backend.stop(js, now)
            self.loop.fail(js, now)
        for js in finished:
            if js.name not in gone:
                js.progress = js.target
                self.loop.complete(js, now)
        for jid in gone:
            self._drop(jid, now)

    def _lose_nodes(self, now: float) -> None:
        """Nodes the backend saw die since the last call: recorded first (the lost nodes in the store's
        meta, a node-lost event on each job that held GPUs there), then the loop drops the jobs' GPUs
        (`ControlLoop.lose`: they wait again) and the node (`ControlLoop.lose_node`)."""
        for t, node in self.backend.lost_nodes[self._lost_seen:]:
            on = [js for js in self.loop.running.values()
                  if js.status not in st.TERMINAL and js.progress < js.target * (1 - 1e-9)
                  and any(i == node for i, _ in js.allocation.placement)]
            lost = [*self.loop.lost_nodes, lost_node(self.backend.cluster, node, t)]
            gone = rec.record_node_lost(self.store, now, lost, on)
            for js in on:
                if js.name not in gone:
                    self.loop.lose(js, now, st.PREEMPTED)
            self.loop.lose_node(node, t)
            self._lost_seen += 1
            for jid in gone:
                self._drop(jid, now)
            self._strand(now)

    def _strand(self, now: float) -> None:
        """Waiting jobs pinned to a GPU type no node has any more: failed, the lost nodes named (they
        would otherwise wait forever; a new such job is refused at submission)."""
        cap = self.state.capacity_by_type()
        stuck = [js for js in self.loop.pending.values() if js.job.gpu_type and not cap.get(js.job.gpu_type)]
        if not stuck:
            return
        why = f"no {', '.join(sorted({js.job.gpu_type for js in stuck}))} GPUs remain ({self.surviving()[1]})"
        gone = rec.record_polled(self.store, now, [], stuck, [], [], why)
        for js in stuck:
            if js.name not in gone:
                self.loop.fail(js, now)
        for jid in gone:
            self._drop(jid, now)

    def surviving(self) -> tuple[ClusterSpec, str]:
        """The cluster a new job is admitted against (the nodes still alive) and, when nodes were lost,
        a sentence naming them (said in a refusal)."""
        lost = list(self.loop.lost_nodes)
        if not lost:
            return self.backend.cluster, ""
        left = surviving(self.backend.cluster, [d["node"] for d in lost])
        names = ", ".join(f'node {d["name"]} ({d["gpus"]} {d["gpu_type"]}) at {d["t"]:.0f} s' for d in lost)
        return left, (f"lost: {names}; {left.total_gpus} of {self.backend.cluster.total_gpus} GPUs remain"
                      f" ({left.describe() or 'none'})")

    def capacity(self) -> dict:
        """GPUs the cluster has now against its spec, and the nodes lost (/v1/health, /v1/cluster)."""
        lost = list(self.loop.lost_nodes)
        total = self.backend.cluster.total_gpus
        gone = sum(d["gpus"] for d in lost)
        return {"gpus": total - gone, "spec_gpus": total, "lost_gpus": gone, "lost_nodes": lost}

    def _run_due(self, now: float) -> None:
        """The loop's rounds and ticks that are due; a failing round is reported and retried later."""
        if time.monotonic() < self._hold_until:
            return
        due: list[str] = []
        t0 = time.perf_counter()
        try:
            for _ in range(3):      # a tick's round is due at once (bounded: a roll-back asks again)
                kinds = self.clock.due(now)
                due += kinds
                for kind in kinds:
                    (self.loop.on_round if kind == "round" else self.loop.on_tick)(now)
        except Exception as exc:
            self._round_failed(now, exc, "round")
            return
        finally:
            gone, self._gone = self._gone, set()
            for jid in gone:
                self._drop(jid, now)
        if "round" in due:
            self.health.rounds += 1
            self.health.last_round_s = time.perf_counter() - t0
            self.health.recovered("round")

    def _round_failed(self, now: float, exc: Exception, where: str) -> None:
        h = self.health
        error = f"{type(exc).__name__}: {exc}"
        log.error("scheduling %s failed (%d in a row): %s", where, h.consecutive_failures + 1, error, exc_info=exc)
        first = h.consecutive_failures == 0 or error != h.last_error
        h.rounds_failed += 1
        h.consecutive_failures += 1
        h.last_error, h.last_failure_at, h.failing = error, now, where
        if first:    # one event per job per streak (or new error), not one per retry
            try:
                rec.record_round_failure(self.store, now, list(self.jobs), error, h.consecutive_failures)
            except Exception:   # the store itself may be what fails: the health item still says so
                log.exception("could not record the failed round")
        self._hold_until = time.monotonic() + min(MAX_BACKOFF_S, self.period_s * 2 ** h.consecutive_failures)
        self.loop.request_round(now)

    def _record_usage(self, now: float) -> None:
        """GPUs in use per type, written when a type's level changes."""
        free, cap = self.state.free_by_type(), self.state.capacity_by_type()
        used = {t: cap[t] - free[t] for t in cap}
        if used != self._usage:
            rec.record_usage(self.store, now, used)
            self._usage = used

    # -- the thread -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpuwise-scheduler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except Exception as exc:  # polling or recording failed: reported, retried after a backoff
                with self._lock:
                    self._round_failed(self.backend.now(), exc, "poll")
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def snapshot(self) -> dict:
        """Cluster view for the API and the dashboard: GPUs per type, free and used, the clock, the
        controller's health and the policy's solver outcomes."""
        with self._lock:
            dead = {d["node"] for d in self.loop.lost_nodes}
            free = self.state.free_by_type()
            cap = self.state.capacity_by_type()
            return {"name": self.backend.cluster.name, "backend": self.backend.name, "policy": self.policy.name,
                    "clock_s": self.backend.now(), "describe": self.backend.cluster.describe(),
                    "gpu_types": [{"gpu": t, "total": cap[t], "free": free[t], "used": cap[t] - free[t]}
                                  for t in cap],
                    "nodes": [{"index": i, "node": n.node_id, "gpu": n.gpu, "gpus": self.state.cap[i],
                               "free": max(0, self.state.free[i]), "lost": i in dead}
                              for i, n in enumerate(self.backend.cluster.nodes)],
                    "capacity": self.capacity(),
                    "active_jobs": len(self.jobs), "backend_notes": self.backend.describe(),
                    "last_round_s": self.health.last_round_s, "rounds": self.health.rounds,
                    "health": self.health.to_json(),
                    "solver": self.policy.solver.summary() if self.policy.solver is not None else None}


def recorded_lost(store: Store, cluster: ClusterSpec) -> list[dict]:
    """The nodes the store records as lost (`ControlLoop.lost_nodes`), if it was scheduled on this
    very cluster (another cluster starts with all its nodes)."""
    here = [[n.node_id, n.gpu, n.gpus] for n in cluster.nodes]
    return list(store.meta("lost_nodes") or []) if store.meta("cluster") == here else []


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
    lost = tuple(d["node"] for d in recorded_lost(store, cluster))
    be = make_backend(backend, cluster, time_scale, state_dir=home / "ray-state", address=ray_address, lost=lost)
    try:
        sch = Scheduler(store, be, pol, home / "specs", period_s)
        sch.restore()
    except BaseException:
        be.close()
        raise
    return sch
