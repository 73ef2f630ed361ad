"""The job service's Ray backend: submitted jobs train for real on the runtime's Ray slot workers.

The Backend protocol maps onto the runtime of issue 12 (one `WorkerPool`, one `RayActuator`, one
runtime `Store`), with this backend in the place of `gpuwise run`'s ControlLoop as the actuator's
owner:

- ``launch`` = `RayActuator.start` on the slots the scheduler reserved (a first start, a rescale at
  the next chunk boundary, or a resume after a restart from the job's last recorded checkpoint);
- ``tick`` (once per scheduling round) = `RayActuator.poll` without waiting: set-ups, chunks of
  ``chunk_steps`` steps each ending in a checkpoint, teardowns; ``poll`` adds GPU(slot)-seconds;
- ``stop`` = release at the next chunk boundary;
- the actuator's reports: ``confirm`` marks the job running (the scheduler records it), a fault or
  a start that timed out restarts it on the allocation it holds, from its last checkpoint;
- a Ray node that died (``lose_node``): queued in ``lost_nodes`` for the scheduler, which drops the
  node from its book through the control loop's ``lose_node`` (as `gpuwise run` does) and puts the
  jobs that held slots there back in the queue; they restart elsewhere from their last checkpoint
  (``lose`` does not restart them on the dead slots). Nodes lost before a restart (``lost``, from
  the store) get no workers.

Which jobs run, and what they train: `gpuwise.runtime.jobspecs` (the runtime's small models only;
other models are refused at submission). Policies see the runtime's measured models
(`MeasuredPerf`: online Pollux fit, measured gradient noise scale). Progress is the fraction of the
spec's samples trained; the clock is wall-clock seconds, continued across restarts. The runtime's
state (checkpoint manifest, measured points, events) lives in ``state_dir``/state.sqlite; the
checkpoints in ``state_dir``/checkpoints.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from gpuwise.control import status as st
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.policies.base import Allocation, JobState
from gpuwise.workload.jobspec import JobSpec
from gpuwise.workload.traces import TraceJob


@dataclass
class RayOptions:
    state_dir: Path
    address: str | None = None     # an existing Ray cluster (None: a private local head)
    chunk_steps: int = 10          # steps between checkpoints (and rescale points)
    lost: tuple[int, ...] = ()     # cluster nodes recorded lost before this start: no workers there


class RayBackend:
    name = "ray"
    restart_s = 0.0    # a start's cost is measured (set-up and checkpoint load), not assumed

    def __init__(self, cluster: ClusterSpec, opts: RayOptions) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from gpuwise.runtime.actuator import RayActuator, Timeouts
        from gpuwise.runtime.measured import MeasuredPerf
        from gpuwise.runtime.pool import WorkerPool
        from gpuwise.runtime.store import Store

        self.cluster, self.opts = cluster, opts
        self.models: dict = {}
        self.perf = MeasuredPerf(self.models)
        self.lost_nodes: list[tuple[float, int]] = []   # (time, node) of nodes whose machine died (this start)
        self._base, self._wall = 0.0, time.monotonic()
        opts.state_dir.mkdir(parents=True, exist_ok=True)
        self.pool = WorkerPool(cluster, opts.state_dir / "ray", opts.address, address_flag="--ray-address",
                               lost=set(opts.lost))
        self.pool.start()
        self.store = Store(opts.state_dir)
        # the online Pollux fits run in a process of their own, off the scheduler's thread
        self.fitter = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        self.act = RayActuator(self.pool, self.store, opts.state_dir / "jobs", opts.chunk_steps, Timeouts(), self,
                               self.perf.goodputs)
        self.act.loop = self

    # -- clock ----------------------------------------------------------------------------------
    def now(self) -> float:
        return self._base + (time.monotonic() - self._wall)

    def set_clock(self, t: float) -> None:
        self._base, self._wall = float(t), time.monotonic()

    # -- admission and jobs -----------------------------------------------------------------------
    def check(self, spec: JobSpec, cluster: ClusterSpec | None = None) -> JobSpec:
        from gpuwise.runtime.jobspecs import runnable_spec

        return runnable_spec(spec, cluster or self.cluster)

    def trace_job(self, row: dict, spec_path: str) -> TraceJob:
        from gpuwise.runtime.jobspecs import run_job
        from gpuwise.runtime.measured import OnlineFit
        from gpuwise.runtime.measurements import job_goodput
        from gpuwise.workload.jobspec import parse_job

        spec = parse_job(row["spec"])
        job = run_job(spec, row["id"], row["submitted_sim"] or 0.0, row["request_gpus"],
                      row["gpu_type"], seed=int(row["id"][:7], 16))
        if job.name not in self.models:
            self.models[job.name] = OnlineFit(ref_batch=int(job.batch_size), fitter=self.fitter)
            good = self.perf.goodputs[job.name] = job_goodput(job, spec)   # the spec as checked at submission
            if self.store.peek(f"measured:{job.name}") is not None:    # it ran before this server started:
                self.act.measurements.replay(job.name, good)              # its measured chunks, from the file
        return job

    # -- the Backend protocol -----------------------------------------------------------------------
    def launch(self, js: JobState, alloc: Allocation, now: float) -> None:
        from gpuwise.runtime.actuator import JobRun, resume_run

        jr = self.act.jobs.get(js.name)
        if jr is None or jr.js is not js:   # first start here (or after a restart of the server)
            jr = self.act.jobs[js.name] = JobRun(js, self.models[js.name])
            js.progress = 0.0               # what counts is the last recorded checkpoint
            saved = self.store.jobs().get(js.name)
            if saved is not None:
                resume_run(jr, saved, self.store)
        js.run_from = math.inf              # running once its workers confirm (set-up done)
        self.act.start(js, alloc, now)

    def stop(self, js: JobState, now: float) -> None:
        if js.name in self.act.jobs:
            self.act.advance(js, now)
            self.act.stop(js, now)

    def tick(self, now: float) -> None:
        self.act.poll(now, 0.0)

    def poll(self, js: JobState, now: float) -> None:
        self.act.advance(js, now)

    def losses(self, job: str) -> list[tuple[int, float]]:
        """(step, training loss) of each step the job trained (the dashboard's curve), from the runtime's
        state file: it survives a server restart; a step trained again after a fault shows its new loss."""
        return self.store.losses(job)

    def measured(self, job: str) -> dict | None:
        """The job's measured-vs-predicted summary (gpuwise.runtime.measurements.summarise), or None
        before its first chunk."""
        return self.store.peek(f"measured:{job}")

    def artifacts_dir(self, job: str) -> Path:
        """The job's folder of checkpoints and logs (gpuwise.runtime.artifacts lists and opens it)."""
        return self.act.job_dir(job)

    def describe(self) -> list[str]:
        where = self.opts.address or f"a private local head ({self.cluster.total_gpus} CPU slot workers)"
        return [f"ray backend: jobs train the runtime's small PyTorch models for real on Ray ({where}); a "
                f"checkpoint every {self.opts.chunk_steps} steps; speed measured (online Pollux fit)",
                *self.perf.assumptions(())]

    def close(self) -> None:
        self.fitter.shutdown(wait=False, cancel_futures=True)
        self.pool.shutdown()
        self.store.close()

    # -- the actuator's reports (gpuwise.runtime.actuator.Owner) --------------------------------------
    def confirm(self, js: JobState, now: float) -> None:
        js.run_from = now

    def roll_back(self, js: JobState, now: float, reason: str = "") -> None:
        """The reserved slots were not free in time (a teardown still running): keep waiting for them."""
        if js.allocation is not None:
            self.act.start(js, js.allocation, now)

    def lose(self, js: JobState, now: float, status: str = st.PREEMPTED) -> None:
        """A fault restarted the job's workers: start again on the same slots, from the last checkpoint;
        unless the slots were on a node that died: the scheduler re-queues the job (`lose_node`)."""
        a = js.allocation
        if a is not None and not any(i in self.pool.lost for i, _ in a.placement):
            js.run_from = math.inf
            self.act.start(js, a, now)

    def lose_node(self, node: int, now: float) -> None:
        """A node's machine died (its jobs already faulted): queued for the scheduler, which drops the
        node's slots from its book (`Scheduler._lose_nodes`)."""
        self.lost_nodes.append((round(now, 3), node))

    def complete(self, js: JobState, now: float) -> None:
        self.act.jobs.pop(js.name, None)   # the scheduler saw the target reached; its slots are free now
        self.models.pop(js.name, None)
        self.perf.goodputs.pop(js.name, None)

    def fail(self, js: JobState, now: float) -> None:
        js.status = st.FAILED
