"""The runtime's `Actuator`: moves real training between Ray slot workers.

Each job is a small state machine driven by `RayActuator.poll`:

    idle -> waiting (for its reserved slots to be physically free) -> setup (new process group,
    load the last recorded checkpoint) -> chunk (k steps, then a checkpoint) -> chunk ... ->
    teardown (at a chunk boundary, when the allocation changed or the job is done) -> waiting/idle

The control loop books releases before grows; physically a shrinking or stopped job lets go of
its slots at its next chunk boundary, and a grow waits for them (at most ``start_timeout_s``, then
it is rolled back). Every Ray call has a deadline; a failed or late call is a fault: the job's
workers are restarted, the steps since its last recorded checkpoint are counted as lost, and the
job waits for the policy to give it GPUs again (it resumes from that checkpoint).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpuwise.control import status as st
from gpuwise.policies.base import Allocation, JobState
from gpuwise.runtime.measured import OnlineFit
from gpuwise.runtime.pool import Slot, WorkerPool
from gpuwise.runtime.store import Store


MAX_FAULTS = 10  # a job that faults more often than this is failed (terminal), not retried forever


class Owner(Protocol):
    """Who the actuator reports to: `gpuwise.control.loop.ControlLoop` (``gpuwise run``) or the job
    service's Ray backend (`gpuwise.jobqueue.ray_backend`)."""

    def confirm(self, js: JobState, now: float) -> None: ...                  # running on its reservation
    def roll_back(self, js: JobState, now: float, reason: str = "") -> None: ...  # could not start in time
    def complete(self, js: JobState, now: float) -> None: ...                 # target reached, slots free
    def lose(self, js: JobState, now: float, status: str = st.PREEMPTED) -> None: ...  # a fault took its workers
    def fail(self, js: JobState, now: float) -> None: ...                     # too many faults: terminal
    def lose_node(self, node: int, now: float) -> None: ...                   # a node's machine died


@dataclass
class Timeouts:
    start_s: float = 120.0    # a reserved allocation must be running within this
    setup_s: float = 60.0     # process group + checkpoint load
    chunk_s: float = 120.0    # one chunk of steps
    teardown_s: float = 30.0
    script_s: float = 3600.0  # a rigid script's whole run (it reports nothing before its exit)
    nodes_s: float = 1.0      # how often Ray's node table is read for dead nodes


@dataclass
class JobRun:
    """The runtime's bookkeeping of one job (what policies never see)."""

    js: JobState
    model: OnlineFit
    phase: str = "idle"                   # idle | waiting | setup | chunk | teardown
    want: Allocation | None = None        # allocation the control loop reserved
    alloc: Allocation | None = None       # allocation the process group runs on
    slots: list[Slot] = field(default_factory=list)
    refs: list = field(default_factory=list)
    deadline: float = math.inf
    op_start: float = 0.0
    step: int = 0                         # steps done (= the last checkpoint's step between chunks)
    ckpt: str | None = None
    chunk: tuple[int, int] = (0, 0)       # (steps, batch) of the chunk in flight
    restarts: int = 0                     # group (re)builds
    rescales: int = 0                     # rebuilds that changed width or batch of a running job
    faults: int = 0
    lost_steps: int = 0
    events: list[dict] = field(default_factory=list)
    losses: list[tuple[int, float]] = field(default_factory=list)
    reserved_at: float = 0.0              # when the loop reserved ``want``
    overheads: list[float] = field(default_factory=list)  # reservation -> running again (s)
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (end time, steps) of each measured chunk
    seen: list[tuple] = field(default_factory=list)   # (round time, Pollux params, noise scale) policies read
    ckpt_next: str | None = None
    boundary: int = 0                     # script jobs: the last boundary the script reported
    launches: int = 0                     # script jobs: launches so far (each has a control folder)

    @property
    def name(self) -> str:
        return self.js.name

    @property
    def script(self) -> bool:
        """The job runs the user's script (an ``entrypoint`` or a model + data job)."""
        return getattr(self.js.job, "argv", None) is not None


def resume_run(jr: JobRun, row: dict, store: Store) -> None:
    """Continue ``jr`` from the state file: its counters, measured points and noise scale from its saved
    row (`Store.jobs`), step and progress from its last recorded checkpoint (none: from scratch); the
    steps of a chunk the stopped run left in flight are added to its lost steps."""
    js = jr.js
    jr.restarts, jr.rescales, jr.faults, jr.lost_steps = row["restarts"], row["rescales"], row["faults"], row["lost_steps"]
    m = row["model"]
    jr.model.points = [tuple(p) for p in m.get("points", [])]
    if jr.model.points:
        jr.model.refit(force=True)
    jr.model.grad_sqr, jr.model.grad_var = m.get("grad_sqr"), m.get("grad_var")
    jr.events = store.events(jr.name)
    last = store.last_checkpoint(jr.name)
    if last is not None:
        jr.step, js.progress, jr.ckpt = last[0], last[1], last[2]
    lost = _lost_in_flight(jr, store)
    if lost:
        jr.lost_steps = row["lost_steps"] + lost
        store.save_job(**{**row, "lost_steps": jr.lost_steps})
    store.put(_in_flight(jr.name), None)


def _in_flight(job: str) -> str:
    return f"chunk_in_flight:{job}"


def _lost_in_flight(jr: JobRun, store: Store) -> int:
    """Steps of the chunk a stopped or killed run left in flight: trained again from the last
    checkpoint, so lost, estimated as a fault's are (its elapsed time / the last measured step time)."""
    flight, elapsed = store.get(_in_flight(jr.name)), store.get("elapsed_s")
    if not flight or elapsed is None or flight[0] != jr.step:    # none, or it reached its checkpoint
        return 0
    _, steps, t0 = flight
    step_s = jr.model.points[-1][3] if jr.model.points else None
    lost = steps if step_s is None else min(steps, int(max(0.0, elapsed - t0) / max(step_s, 1e-6)))
    if lost:
        detail = {"reason": "the run stopped mid-chunk", "lost_steps": lost, "resume_step": jr.step}
        store.event(jr.name, elapsed, "fault", detail)
        jr.events.append({"t": elapsed, "kind": "fault", **detail})
    return lost


def _first_error(done: list) -> str | None:
    """Name of the first error among finished calls (None: all succeeded)."""
    import ray

    for ref in done:
        try:
            ray.get(ref, timeout=1.0)
        except Exception as e:  # a dead actor (preemption, crash) or a failed collective
            return type(e).__name__
    return None


class RayActuator:
    def __init__(self, pool: WorkerPool, store: Store, jobs_dir: Path, chunk_steps: int,
                 timeouts: Timeouts, clock, goodputs: dict | None = None) -> None:
        from gpuwise.runtime.measurements import FILE, MeasurementLog

        self.pool, self.store, self.jobs_dir = pool, store, jobs_dir
        # jobs' goodput objects (the policies' too: MeasuredPerf.goodputs), calibrated with every chunk
        self.goodputs = {} if goodputs is None else goodputs
        self.measurements = MeasurementLog(jobs_dir.parent / FILE)
        self.k, self.timeouts, self.clock = int(chunk_steps), timeouts, clock
        self.jobs: dict[str, JobRun] = {}
        self.loop: Owner | None = None   # set by the owner before the first start
        self._nodes_at = -math.inf       # when Ray's node table was last read

    # -- Actuator protocol (called by the control loop) -------------------------------------------
    def advance(self, js: JobState, now: float) -> None:
        if js.allocation is not None:
            js.attained_gpu_s += js.allocation.num_gpus * max(0.0, now - js.last_update)
        js.last_update = now

    def stop(self, js: JobState, now: float) -> None:
        self.jobs[js.name].want = None
        if self.jobs[js.name].phase == "waiting":
            self.jobs[js.name].phase = "idle"

    def start(self, js: JobState, alloc: Allocation, now: float) -> None:
        jr = self.jobs[js.name]
        jr.want, jr.reserved_at = alloc, now
        js.status = st.RESCALING if jr.alloc is not None else st.STARTING
        jr.deadline = now + self.timeouts.start_s
        if jr.phase == "idle":
            jr.phase = "waiting"

    # -- events --------------------------------------------------------------------------------
    def event(self, jr: JobRun, now: float, kind: str, **detail) -> None:
        e = {"t": round(now, 3), "kind": kind, **detail}
        jr.events.append(e)
        self.store.event(jr.name, now, kind, detail)

    def in_flight(self) -> list:
        return [r for jr in self.jobs.values() for r in jr.refs]

    # -- the poll step ---------------------------------------------------------------------------
    def poll(self, now: float, wait_s: float) -> None:
        import ray

        if now - self._nodes_at >= self.timeouts.nodes_s:
            self._nodes_at = now
            for node in self.pool.check_nodes():
                self.node_lost(node, now)
        for jr in list(self.jobs.values()):
            if jr.phase == "waiting":
                self._try_setup(jr, now)
            elif jr.phase == "chunk" and jr.script and not jr.js.job.elastic and jr.want != jr.alloc:
                jr.refs = []  # a rigid script has no boundary to wait for: it is restarted now
                self._teardown(jr, now)
        refs = self.in_flight()
        if refs:
            ray.wait(refs, num_returns=1, timeout=max(0.0, wait_s))
        else:
            time.sleep(max(0.0, min(wait_s, 0.2)))
        now = self.clock.now()
        for jr in list(self.jobs.values()):
            if not jr.refs:
                continue
            done, _ = ray.wait(jr.refs, num_returns=len(jr.refs), timeout=0)
            if len(done) == len(jr.refs):
                self._finish_op(jr, now)
            elif failed := _first_error(done):  # a lost rank: its peers wait in a collective until
                self.fault(jr, now, f"{jr.phase} failed: {failed}")  # gloo's timeout; restart them now
            elif now > jr.deadline:
                self.fault(jr, now, f"{jr.phase} exceeded its {jr.deadline - jr.op_start:.0f} s deadline")

    def _finish_op(self, jr: JobRun, now: float) -> None:
        import ray

        phase = jr.phase
        try:
            results = ray.get(jr.refs, timeout=10.0)
        except Exception as e:  # a dead actor (preemption, crash) or a failed collective
            self.fault(jr, now, f"{phase} failed: {type(e).__name__}")
            return
        jr.refs = []
        if phase == "setup" and jr.script:
            bad = next((x for x in results if x.get("kind") not in ("ready", "started")), None)
            if bad is not None:
                self.fault(jr, now, f"script {bad['kind']} {bad.get('exit', '')} at start (log {bad.get('log')})")
                return
            self._started(jr, now, max(x.get("setup_s", 0.0) for x in results))
        elif phase == "setup":
            self._started(jr, now, max(results))
        elif phase == "chunk" and jr.script:
            self._script_boundary(jr, now, results)
        elif phase == "chunk":
            self._chunk_done(jr, now, results[0])
        elif phase == "teardown":
            self._released(jr, now)

    # -- transitions ---------------------------------------------------------------------------
    def _try_setup(self, jr: JobRun, now: float) -> None:
        import ray

        alloc = jr.want
        picked: list[Slot] = []
        for node, g in alloc.placement:
            free = self.pool.free_on(node)
            if len(free) < g:
                if now > jr.deadline:
                    self.event(jr, now, "rollback", reason="slots not free in time")
                    jr.phase, jr.want = "idle", None
                    self.loop.roll_back(jr.js, now, "slots not free in time")
                return
            picked += free[:g]
        for s in picked:
            s.owner = jr.name
        jr.slots, jr.alloc = picked, alloc
        try:
            master, port = ray.get(picked[0].actor.address.remote(), timeout=30.0)
        except Exception as e:
            self.fault(jr, now, f"address failed: {type(e).__name__}")
            return
        if jr.script:
            self._launch_script(jr, now, master, port)
            return
        spec = {"model": jr.js.job.application, "seed": jr.js.job.seed, "lr": jr.js.job.lr}
        jr.refs = [s.actor.setup.remote(spec, r, len(picked), master, port, jr.ckpt, self.timeouts.setup_s)
                   for r, s in enumerate(picked)]
        self._op(jr, "setup", now, self.timeouts.setup_s)

    # -- script jobs: the script runs the steps; boundaries are its reports (gpuwise.runtime.script) --
    def _launch_script(self, jr: JobRun, now: float, master: str, port: int) -> None:
        from gpuwise.runtime.script_jobs import launch_spec

        jr.launches, jr.boundary = jr.launches + 1, 0
        spec = launch_spec(jr.js.job, jr.name, jr.alloc.batch_size or jr.js.job.batch_size, self.k, jr.ckpt,
                           self.job_dir(jr.name), jr.launches)
        limit = max(self.timeouts.setup_s, self.timeouts.start_s)  # the first launch imports the script's libraries
        jr.refs = [s.actor.launch.remote(spec, r, len(jr.slots), master, port, limit) for r, s in enumerate(jr.slots)]
        self._op(jr, "setup", now, limit + 10.0)

    def job_dir(self, name: str) -> Path:
        """A job's artifacts: checkpoints/, logs/ (script jobs) and the control folders of its launches."""
        return self.jobs_dir / name

    def _script_boundary(self, jr: JobRun, now: float, results: list[dict]) -> None:
        r = results[0]
        if not jr.js.job.elastic:  # a rigid script ran to its end
            codes = [x.get("exit") for x in results]
            if all(c == 0 for c in codes):
                jr.js.progress = jr.js.target
                self.event(jr, now, "done", step=None, rigid=True)
                self._released(jr, now)
            else:
                self.fault(jr, now, f"rigid script exited with {codes} (logs {r.get('log')})")
            return
        bad = next((x for x in results if x.get("kind") not in ("chunk", "ready")), None)
        if bad is not None:
            self.fault(jr, now, f"script {bad['kind']} {bad.get('exit', '')} at boundary {jr.boundary} (log {bad.get('log')})")
            return
        jr.ckpt_next, jr.boundary = r["checkpoint"], r["boundary"]
        self._chunk_done(jr, now, r)

    def _follow(self, jr: JobRun, now: float, cmd: str | None, phase: str, limit: float) -> None:
        """Answer the script's last boundary with ``cmd`` (rank 0 reads it) and wait for the next one."""
        jr.refs = [s.actor.follow.remote(jr.boundary, cmd if r == 0 else None, limit) for r, s in enumerate(jr.slots)]
        self._op(jr, phase, now, limit + 10.0)

    def _op(self, jr: JobRun, phase: str, now: float, limit: float) -> None:
        jr.phase, jr.op_start, jr.deadline = phase, now, now + limit

    def _started(self, jr: JobRun, now: float, setup_s: float) -> None:
        a = jr.alloc
        kind = "rescale" if jr.restarts and jr.js.status == st.RESCALING else "start"
        jr.restarts += 1
        if kind == "rescale":
            jr.rescales += 1
        self.event(jr, now, kind, gpu_type=a.gpu_type, gpus=a.num_gpus, nodes=a.num_nodes, batch=a.batch_size,
                   step=jr.step, setup_s=round(setup_s, 3), checkpoint=jr.ckpt)
        jr.overheads.append(now - jr.reserved_at)
        if jr.want != jr.alloc:  # the policy changed its mind while the group was being built
            self._teardown(jr, now)
            return
        self.loop.confirm(jr.js, now)
        self._launch(jr, now)

    def _launch(self, jr: JobRun, now: float) -> None:
        batch = int(jr.alloc.batch_size or jr.js.job.batch_size)
        steps = self.k
        jr.chunk = (steps, batch)
        if jr.script and jr.js.job.elastic:
            self._follow(jr, now, "go", "chunk", self.timeouts.chunk_s)
            return
        if jr.script:  # a rigid script: the next thing it says is its exit
            jr.boundary = math.inf
            self._follow(jr, now, None, "chunk", self.timeouts.script_s)
            return
        folder = self.job_dir(jr.name) / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        ckpt = str(folder / f"step-{jr.step + steps:07d}.pt")
        lr = jr.js.job.lr * math.sqrt(batch / jr.js.job.batch_size)  # square-root LR scaling rule
        jr.refs = [s.actor.chunk.remote(jr.step, steps, batch, lr, ckpt) for s in jr.slots]
        jr.ckpt_next = ckpt
        self.store.put(_in_flight(jr.name), [jr.step, steps, now])   # lost steps if the run stops now
        self._op(jr, "chunk", now, self.timeouts.chunk_s)

    def _chunk_done(self, jr: JobRun, now: float, r: dict) -> None:
        steps, batch = jr.chunk
        a, js = jr.alloc, jr.js
        n = len(r["step_s"])
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        # the chunk's wall time per step, not the in-worker step time: the per-chunk costs (Ray call,
        # checkpoint write) are part of what a job pays per step, and the simulator's replay must see them
        wall_step = max(mean(r["step_s"]), (now - jr.op_start) / n)
        jr.model.observe(a.num_nodes, a.num_gpus, batch / a.num_gpus, wall_step, mean(r["sync_s"]),
                         mean(r["big_sq"]), mean(r["small_sq"]), batch, mean(r["small_batch"]))
        self._measured(jr, batch, n, mean(r["step_s"]), r)
        jr.chunks.append((now, n))    # with model.points: the replay's same-decisions check
        js.progress = min(js.target, js.progress + n * float(jr.model.gain(batch)))
        jr.model.trained[batch] = jr.model.trained.get(batch, 0) + n
        jr.step = r["end_step"]
        old, jr.ckpt = jr.ckpt, jr.ckpt_next
        self.store.record_checkpoint(jr.name, jr.step, js.progress, jr.ckpt, now)  # now it counts
        if old and old != jr.ckpt:
            Path(old).unlink(missing_ok=True)  # the manifest keeps the history; disk keeps the last
        chunk = list(zip(range(jr.step - n, jr.step), r["loss"]))
        jr.losses += chunk
        self.store.record_losses(jr.name, chunk)
        self.advance(js, now)
        js.measured_speed = n * float(jr.model.gain(batch)) / max(1e-9, now - jr.op_start) / js.target
        self.save(jr)
        if js.progress >= js.target - 1e-9:
            self.event(jr, now, "done", step=jr.step, loss=r["loss"][-1])
            self._teardown(jr, now)
        elif jr.want != jr.alloc:
            self._teardown(jr, now)
        else:
            self._launch(jr, now)

    def _measured(self, jr: JobRun, batch: int, steps: int, step_s: float, r: dict) -> None:
        """One chunk's in-worker step time (and CUDA peak) to the job's goodput object and measurements.csv."""
        a, peak = jr.alloc, r.get("peak_bytes")
        gpn = max((g for _, g in a.placement), default=a.num_gpus)
        from gpuwise.runtime.measurements import summarise

        good = self.goodputs.get(jr.name)
        row = self.measurements.record(jr.js.job, a.gpu_type, r.get("device") or "", a.num_gpus, a.num_nodes, batch,
                                       steps, step_s, None if peak is None else peak / 2 ** 30, good, gpn)
        key = f"measured:{jr.name}"
        self.store.put(key, summarise(self.store.get(key), row, good))   # the job page's measured vs predicted

    def _teardown(self, jr: JobRun, now: float) -> None:
        if jr.script and jr.js.job.elastic:
            self._follow(jr, now, "done" if jr.js.progress >= jr.js.target - 1e-9 else "stop", "teardown",
                         self.timeouts.teardown_s)
            return
        if jr.script:  # a rigid script cannot stop at a boundary: restarting its actors ends it
            self.event(jr, now, "rigid-restart", reason="allocation changed; the script restarts from its own "
                       "checkpoints, if it writes any")
            for s in jr.slots:
                self.pool.restart(s)
            self._released(jr, now)
            return
        jr.refs = [s.actor.teardown.remote() for s in jr.slots]
        self._op(jr, "teardown", now, self.timeouts.teardown_s)

    def _released(self, jr: JobRun, now: float) -> None:
        for s in jr.slots:
            s.owner = None
        jr.slots, jr.alloc = [], None
        js = jr.js
        if js.progress >= js.target - 1e-9:
            jr.phase = "idle"
            self.loop.complete(js, now)
            self.save(jr)
        elif jr.want is not None:
            jr.phase = "waiting"
            self._try_setup(jr, now)
        else:
            jr.phase = "idle"

    def node_lost(self, node: int, now: float) -> None:
        """A node's machine died: every job running or reserved there is rebuilt elsewhere from its
        last checkpoint (a fault), then the owner drops the node's GPUs from its book."""
        for jr in self.jobs.values():
            if jr.js.status in st.TERMINAL:
                continue
            on = [a for a in (jr.alloc, jr.want) if a is not None and any(i == node for i, _ in a.placement)]
            if not on:
                continue
            self.event(jr, now, "node-lost", node=node, slots=[s.key for s in jr.slots if s.node == node])
            if jr.phase in ("idle", "waiting"):  # only reserved there: its reservation goes back
                jr.want, jr.phase = None, "idle"
                self.loop.lose(jr.js, now, st.PENDING)
            else:
                self.fault(jr, now, f"node {node} lost")
        self.loop.lose_node(node, now)

    def fault(self, jr: JobRun, now: float, reason: str) -> None:
        """Restart the group's workers, count the lost steps, and let the policy re-place the job."""
        lost = 0
        if jr.phase == "chunk" and jr.model.points:
            step_s = jr.model.points[-1][3]
            lost = min(jr.chunk[0], int((now - jr.op_start) / max(step_s, 1e-6)))
        elif jr.phase == "chunk":
            lost = jr.chunk[0]
        jr.lost_steps += lost
        jr.faults += 1
        self.store.put(_in_flight(jr.name), None)
        for s in jr.slots:
            if s.warming is not None:  # an injected preemption already restarted its victim
                pass
            elif jr.script and jr.js.job.elastic:  # survivors end with the broken group: keep them warm
                s.warming = s.actor.drain.remote(self.timeouts.teardown_s)
            else:
                self.pool.restart(s)
            s.owner = None
        jr.slots, jr.alloc, jr.refs, jr.want, jr.phase = [], None, [], None, "idle"
        self.event(jr, now, "fault", reason=reason, lost_steps=lost, resume_step=jr.step, batch=jr.chunk[1])
        if jr.js.progress >= jr.js.target - 1e-9:  # its last checkpoint already finished it
            self.loop.complete(jr.js, now)
        elif jr.faults > MAX_FAULTS:
            self.event(jr, now, "failed", faults=jr.faults)
            self.loop.fail(jr.js, now)
        elif jr.js.status not in st.TERMINAL:
            self.advance(jr.js, now)
            self.loop.lose(jr.js, now, st.PREEMPTED)
        self.save(jr)

    def save(self, jr: JobRun) -> None:
        js = jr.js
        self.store.save_job(jr.name, js.status, js.submitted_s, js.finish_s, jr.restarts, jr.rescales, jr.faults,
                            jr.lost_steps, js.attained_gpu_s,
                            {"points": jr.model.points, "grad_sqr": jr.model.grad_sqr,
                             "grad_var": jr.model.grad_var})
