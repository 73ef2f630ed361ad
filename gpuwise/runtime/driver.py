"""`run_workload`: one policy driving real training on Ray, from arrivals to the last completion.

The main loop is single-threaded: it submits arrivals, fires the control loop's rounds when the
clock says so, injects preemptions if asked, and lets the actuator wait on the Ray calls in
flight (at most until the next thing is due). Everything is saved to the state folder's SQLite
file as it happens, so a restarted run with the same folder resumes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpuwise.control import status as st
from gpuwise.control.loop import ControlLoop
from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.policies.base import JobState, Policy
from gpuwise.runtime.actuator import JobRun, RayActuator, Timeouts, resume_run
from gpuwise.runtime.clock import WallClock
from gpuwise.runtime.measured import MeasuredPerf, OnlineFit
from gpuwise.runtime.pool import WorkerPool
from gpuwise.runtime.store import Store
from gpuwise.sim.cluster import SimResult
from gpuwise.sim.engine import TimeAverage
from gpuwise.workload.traces import Workload


@dataclass
class RunOptions:
    state_dir: Path
    address: str | None = None
    chunk_steps: int = 10
    preempt_every_s: float | None = None
    max_preemptions: int | None = None  # stop injecting after this many (None: no limit)
    max_wall_s: float = 900.0          # give up (jobs left unfinished) after this long
    round_s: float | None = 5.0        # policy round cadence (None: the policy's own, as simulate)
    timeouts: Timeouts = field(default_factory=Timeouts)
    on_tick: Callable | None = None    # progress display: called with the actuator's jobs
    devices: str = "auto"              # auto | cuda | cpu: real GPUs or fake CPU slots (runtime.devices)


@dataclass
class RunResult:
    sim: SimResult                     # the same record the simulator returns (for sim.metrics)
    runs: dict[str, JobRun]
    startup_s: float
    resumed: bool
    preemptions: int
    preemptions_skipped: int = 0       # due while no job was in a chunk with all its workers up
    lost_nodes: list[dict] = field(default_factory=list)  # nodes whose machine died (ControlLoop.lose_node)
    devices: dict = field(default_factory=dict)            # the pool's DeviceChoice (mode, count, names, why)


def _restore(store: Store, workload: Workload, resume: bool) -> tuple[dict, float]:
    if not resume:
        store.reset()
        (store.path.parent / "measurements.csv").unlink(missing_ok=True)   # a new run's validation rows
        store.put("workload", workload.source)
        return {}, 0.0
    return store.jobs(), float(store.get("elapsed_s", 0.0))


def run_workload(cluster: ClusterSpec, workload: Workload, policy: Policy, opts: RunOptions,
                 pool: WorkerPool | None = None) -> RunResult:
    """Run to completion (or ``opts.max_wall_s``). ``pool``: started workers to reuse (kept
    running afterwards; tests share one); default: a pool of its own, shut down at the end."""
    from gpuwise.runtime.lock import WriterLock

    own = pool is None
    if own:
        pool = WorkerPool(cluster, opts.state_dir / "ray", opts.address, devices=opts.devices)
        if not opts.address:   # a --devices that this machine cannot give: exit 2 before any state is written
            pool.choose_local()
    with WriterLock(opts.state_dir / "state.sqlite.lock", "--state", str(opts.state_dir), "gpuwise run"):
        return _run_locked(cluster, workload, policy, opts, pool, own)


def _run_locked(cluster: ClusterSpec, workload: Workload, policy: Policy, opts: RunOptions,
                pool: WorkerPool, own: bool) -> RunResult:
    store = Store(opts.state_dir)
    resume = store.get("workload") == workload.source and not store.get("finished", False)
    saved, offset = _restore(store, workload, resume)
    if not own and pool.cluster != cluster:
        raise ValueError("the worker pool was started for another cluster")
    wall = time.perf_counter()
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    fitter = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        if own:
            pool.start()
        return _drive(cluster, workload, policy, opts, store, pool, saved, offset, resume, wall, fitter)
    finally:
        fitter.shutdown(wait=False, cancel_futures=True)
        if own:
            pool.shutdown()
        else:
            pool.release_all()
        store.close()


def _drive(cluster, workload, policy, opts, store, pool, saved, offset, resume, wall, fitter) -> RunResult:
    clock = WallClock(offset)
    from gpuwise.runtime.measurements import job_goodput

    models = {j.name: OnlineFit(ref_batch=int(j.batch_size), fitter=fitter) for j in workload.jobs}
    perf = MeasuredPerf(models, goodputs={j.name: job_goodput(j) for j in workload.jobs})
    act = RayActuator(pool, store, opts.state_dir / "jobs", opts.chunk_steps, opts.timeouts, clock, perf.goodputs)
    if resume:   # the goodput objects' calibration continues from the chunks measured before the stop
        for name, good in perf.goodputs.items():
            act.measurements.replay(name, good)
    gpus_used, queue_len = TimeAverage(start=offset, sample_every=0.0), TimeAverage(start=offset, sample_every=0.0)

    def levels(now: float, used: int, waiting: int) -> None:
        gpus_used.update(now, used)
        queue_len.update(now, waiting)

    loop = act.loop = ControlLoop(cluster, policy, perf, clock, act, levels)
    arrivals = []
    for i, job in enumerate(workload.jobs):
        js = JobState(job=job, submitted_s=job.arrival_s, target=float(job.steps), last_update=job.arrival_s,
                      job_index=i)
        jr = act.jobs[job.name] = JobRun(js, models[job.name])
        if job.name in saved:
            _resume_job(jr, saved[job.name], store, loop)
        if js.status not in st.TERMINAL:
            arrivals.append(jr)
    preempted, skipped, next_preempt = 0, 0, (offset + opts.preempt_every_s) if opts.preempt_every_s else math.inf
    while True:
        now = clock.now()
        while arrivals and arrivals[0].js.job.arrival_s <= now:
            jr = arrivals.pop(0)
            jr.js.submitted_s = min(jr.js.submitted_s, now) if resume else jr.js.job.arrival_s
            act.event(jr, now, "submit")
            loop.submit(jr.js, now)
        for kind in clock.due(now):
            (loop.on_round if kind == "round" else loop.on_tick)(now)
            _seen(act.jobs, now)
        if now >= next_preempt and (opts.max_preemptions is None or preempted < opts.max_preemptions):
            hit = _inject(act, pool, now)
            preempted, skipped = preempted + hit, skipped + 1 - hit
            next_preempt = now + opts.preempt_every_s
        if not arrivals and all(jr.js.status in st.TERMINAL for jr in act.jobs.values()):
            break
        if now - offset > opts.max_wall_s:
            break
        nxt = min(arrivals[0].js.job.arrival_s if arrivals else math.inf, clock.next_at(), next_preempt)
        act.poll(now, min(0.5, max(0.0, nxt - now)))
        store.put("elapsed_s", clock.now())
        if opts.on_tick:
            opts.on_tick(clock.now(), act.jobs)
    end = clock.now()
    for jm in models.values():  # the replay reads the final models
        jm.collect(wait=True)
    store.put("finished", not arrivals and all(jr.js.status in st.TERMINAL for jr in act.jobs.values()))
    for jr in act.jobs.values():
        act.save(jr)
    res = SimResult(policy.name, cluster, [jr.js for jr in act.jobs.values()], loop.decision_s, gpus_used,
                    queue_len, end, sum(len(jr.events) for jr in act.jobs.values()), time.perf_counter() - wall, 0,
                    _mean_overhead(act.jobs), [])
    return RunResult(res, act.jobs, pool.start_s, resume, preempted, skipped, loop.lost_nodes,
                     pool.device.as_dict() if pool.device is not None else {})


def _mean_overhead(jobs: dict[str, JobRun]) -> float:
    xs = [x for jr in jobs.values() for x in jr.overheads]
    return sum(xs) / len(xs) if xs else 0.0


def _seen(jobs: dict[str, JobRun], now: float) -> None:
    """Each job's model as the policy read it this round (its fit collected), when it changed: the
    replay's policy sees the same estimates at the same times."""
    for jr in jobs.values():
        snap = (jr.model.params, jr.model.phi)
        if not jr.seen or jr.seen[-1][1:] != snap:
            jr.seen.append((now, *snap))


def _inject(act: RayActuator, pool: WorkerPool, now: float) -> int:
    """Preempt one training job (the one that has run longest since a fault): kill one of its workers."""
    # a job whose workers all run (none restarting after an earlier preemption): one fault at a time
    victims = [jr for jr in act.jobs.values() if jr.phase == "chunk" and jr.slots
               and all(s.warming is None for s in jr.slots)]
    if not victims:
        return 0
    jr = min(victims, key=lambda j: (j.faults, j.name))
    pool.restart(jr.slots[-1])
    act.event(jr, now, "preempt", slot=jr.slots[-1].key)
    return 1


def _resume_job(jr: JobRun, row: dict, store: Store, loop: ControlLoop) -> None:
    """Restore a job from the state file: finished jobs stay finished; others continue from their
    last recorded checkpoint (and keep their measured points)."""
    js = jr.js
    js.submitted_s = row["submitted_s"] if row["submitted_s"] is not None else js.submitted_s
    js.restarts, js.attained_gpu_s = row["restarts"], row["attained_gpu_s"]
    resume_run(jr, row, store)
    if row["status"] == st.DONE:
        js.status, js.finish_s, js.progress = st.DONE, row["finish_s"], js.target
        loop.jobs.append(js)
    elif row["status"] in (st.DROPPED, st.FAILED):
        js.status, js.finish_s = row["status"], row["finish_s"]
        loop.jobs.append(js)


def check_options(opts: RunOptions) -> None:
    if opts.preempt_every_s is not None and not (opts.preempt_every_s > 0 and math.isfinite(opts.preempt_every_s)):
        raise InputError("--preempt-every", opts.preempt_every_s, "give seconds > 0")
    if opts.round_s is not None and not (opts.round_s > 0 and math.isfinite(opts.round_s)):
        raise InputError("--round-s", opts.round_s, "give seconds > 0")
    if opts.chunk_steps < 1:
        raise InputError("--chunk-steps", opts.chunk_steps, "give at least 1 step per chunk")
