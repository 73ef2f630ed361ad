"""Trace-driven, event-driven cluster simulator on the shared `Engine`.

Events: ``arrive`` (a job is submitted), ``finish`` (a job's projected completion; cancelled and
re-projected when its allocation changes), ``round`` (call the policy) and ``tick`` (periodic
policies). Progress between events is integrated exactly (rates are piecewise constant), so the
cost is per event, never per simulated second. Every allocation change costs the job
``restart_s`` seconds without progress (checkpoint-restart, as in Pollux's simulator).

The cluster may be unbounded (a pay-per-use cloud: machines created on demand, cost = GPU-seconds
allocated); then only policies with ``unbounded_ok`` run. The rental policies of issue 5 run here
through `gpuwise.policies.rental.FixedWidthScheduler` and give the same response times and rented
GPUs as the specialised `gpuwise.sim.cloud` on the same seeded stream (tests/test_sched_unbounded.py);
that one exists for speed -- a fixed-width policy needs no allocation rounds, so it simulates 10^6
jobs in seconds, which this general loop (a policy call per arrival) does not.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.control.loop import ControlLoop
from gpuwise.policies.base import Allocation, JobState, Policy
from gpuwise.sim import ground_truth as gt
from gpuwise.sim.engine import Engine, TimeAverage
from gpuwise.sim.usage import UsageLog
from gpuwise.workload.traces import Workload, check_fits

DEFAULT_RESTART_S = 30.0  # Pollux simulator's re-allocation delay


@dataclass
class SimResult:
    """Raw outcome of one run (`gpuwise.sim.metrics.summarise` turns it into metrics)."""

    policy: str
    cluster: ClusterSpec
    jobs: list[JobState]
    decision_s: list[float]               # wall-clock seconds of every policy call, model evaluation excluded
    gpus_used: TimeAverage                # mean, integral and change points of GPUs in use
    queue_len: TimeAverage                # the same for jobs waiting
    end_s: float
    events: int
    wall_s: float
    seed: int
    restart_s: float
    assumptions: list[str] = field(default_factory=list)
    model_s: list[float] = field(default_factory=list)   # seconds per round evaluating the PerfModel for the policy
    solver: dict | None = None            # the policy's HiGHS outcomes (`SolverLog.summary`), if it solves
    usage: UsageLog = field(default_factory=UsageLog)   # per job: first start, allocations, GPU-s per type

    @property
    def gpu_series(self) -> list[tuple[float, float]]:
        """(time, GPUs in use) at each change: the last level of each instant."""
        return self.gpus_used.samples

    @property
    def queue_series(self) -> list[tuple[float, float]]:
        """(time, jobs waiting) at each change."""
        return self.queue_len.samples


def accrue(js: JobState, now: float, constant: bool = True) -> None:
    """Bring ``js``'s GPU-seconds and progress up to ``now`` at its allocation's rates (nothing
    accrues before ``run_from``, the end of its restart delay). ``constant``: one rate for the whole
    job (rigid and job-spec jobs), else the application's rate per progress segment. The one
    integration of the simulator and the job service's sim backend."""
    if js.allocation is None or js.rates is None:
        js.last_update = now
        return
    js.attained_gpu_s += js.allocation.num_gpus * max(0.0, now - js.last_update)
    start = max(js.last_update, js.run_from)
    if now > start:
        if constant:
            js.progress = min(js.target, js.progress + (now - start) * float(js.rates[0]))
        else:
            js.progress = gt.progress_after(js.job.application, js.rates, js.progress, now - start, js.target)
    js.last_update = now


def begin(js: JobState, alloc: Allocation, perf) -> np.ndarray:
    """A (re)started job's progress rates on ``alloc`` from ``perf`` (a ground truth), and its allocation
    annotated with the layout it runs with (job-spec jobs; ``perf.layout``). Shared by the simulator
    and the job service's sim backend."""
    layout_of = getattr(perf, "layout", None)   # truths without layouts (DP profiles) have none
    layout = layout_of(js.job, alloc.gpu_type, alloc.num_gpus, alloc.num_nodes, alloc.batch_size) if layout_of else None
    if layout is not None and js.allocation is not None:
        js.allocation = replace(js.allocation, layout=layout)
    return perf.rates(js.job, alloc.gpu_type, alloc.num_gpus, alloc.num_nodes, alloc.batch_size)


class ClusterSimulator:
    """One policy on one cluster and one workload."""

    def __init__(self, cluster: ClusterSpec, workload: Workload, policy: Policy,
                 restart_s: float = DEFAULT_RESTART_S, seed: int = 0, speed_noise: float = 0.0,
                 policy_model: str = "oracle", truth=None, faults=(), node_losses=(),
                 first_start_s: dict[str, float] | None = None, policy_perf=None) -> None:
        """``truth``: the ground-truth speed model (default: the Pollux profiles,
        `ground_truth.GroundTruthPerf`); a replacement (e.g. the runtime's measured models) needs
        ``rates``, ``target``, ``batch_range``, ``goodput_grid`` and ``assumptions`` and may set
        ``segmented = False`` (one constant rate per allocation). ``faults``: (time, job name,
        progress lost[, recovery s]) -- a running job loses its GPUs and that much progress (a replayed
        run's preemptions), and trains again no earlier than recovery s after the fault (its workers restart).
        ``node_losses``: (time, node) -- the node's machine dies (a replayed run's lost Ray node): its jobs
        lose their GPUs (their lost progress comes with their faults) and its GPUs leave the book. ``restart_s``: seconds lost per (re)start;
        ``first_start_s``: job name -> seconds its first start costs instead (a replayed run's measured launch);
        ``policy_perf``: what policies see instead of ``truth`` (a replayed run's estimates as they evolved); ``seed``: drives ``speed_noise`` (sigma of a
        per-job log-normal factor on the true speed that policies do not see; 0 = none);
        ``policy_model``: what policies see -- "oracle" (the measured truth) or "fitted" (the
        shared JobModel fitted on the profiles)."""
        if cluster.unbounded and not policy.unbounded_ok:
            from gpuwise.errors import InputError

            raise InputError("--policy", policy.name, "this policy plans against a fixed capacity; on an "
                             "unbounded cluster use fifo, first-fit or a rental policy")
        check_fits(workload, {t: (1 << 62) if cluster.unbounded else cluster.gpus_of_type(t)
                              for t in cluster.gpu_types})
        self.cluster, self.workload, self.policy = cluster, workload, policy
        self.faults = list(faults)
        self.node_losses = list(node_losses)
        self._ready_at: dict[str, float] = {}   # job -> earliest time it trains again after a fault
        self._first_start = dict(first_start_s or {})   # job -> its first start's cost (s), once
        self.restart_s, self.seed = float(restart_s), int(seed)
        self.perf = gt.GroundTruthPerf(cluster) if truth is None else truth
        self._segmented = getattr(self.perf, "segmented", True)
        if policy_perf is not None:
            self.policy_perf = policy_perf
        elif policy_model == "oracle" or truth is not None:
            self.policy_perf = self.perf
        elif policy_model == "fitted":
            from gpuwise.policies.job_model_perf import JobModelPerf

            self.policy_perf = JobModelPerf.for_cluster(cluster)
        else:
            from gpuwise.errors import InputError

            raise InputError("--policy-model", policy_model, "use oracle or fitted")
        self._check_specs()
        rng = np.random.default_rng(seed)
        self._noise = (np.exp(rng.normal(0.0, speed_noise, len(workload.jobs)))
                       if speed_noise > 0 else None)

    def _check_specs(self) -> None:
        """A job-spec job whose model fits in memory on none of its allowed GPU types would never
        start: refuse it before simulating, naming the row."""
        from gpuwise.errors import InputError

        for j in self.workload.jobs:
            if j.jobspec is None:
                continue
            types = [t for t in self.cluster.gpu_types if j.gpu_type in (None, t)]
            if all(self.perf.batch_range(j, t)[2] < 1 for t in types):
                raise InputError(f"{self.workload.source} row {j.row} column jobspec", j.jobspec,
                                 f"the model fits on none of {', '.join(types)} with any layout the spec allows "
                                 "(its tp/pp/ZeRO on up to every GPU of the type); use a cluster with larger or "
                                 "more GPUs, or allow more sharding in the spec's parallelism")

    # -- physics (the simulator's `Actuator`) ------------------------------------------------
    def _constant(self, js: JobState) -> bool:
        """Rigid and job-spec jobs (and every job of a truth without segments) run at one rate."""
        return js.job.application is None or not self._segmented

    def advance(self, js: JobState, now: float) -> None:
        if js.allocation is not None:
            self.usage.held(js.name, js.allocation.gpu_type, js.allocation.num_gpus, now - js.last_update)
        accrue(js, now, self._constant(js))

    def _project(self, js: JobState) -> None:
        if js.finish_token is not None:
            self.engine.cancel(js.finish_token)
            js.finish_token = None
        if js.allocation is None:
            return
        if self._constant(js):
            r = float(js.rates[0])
            left = (js.target - js.progress) / r if r > 0 else math.inf
        else:
            left = gt.time_to_progress(js.job.application, js.rates, js.progress, js.target)
        if math.isfinite(left):
            js.finish_token = self.engine.schedule(js.run_from + left, "finish", js)

    def stop(self, js: JobState, now: float) -> None:
        js.rates, js.measured_speed = None, None
        self._project(js)

    def start(self, js: JobState, alloc: Allocation, now: float) -> None:
        """Instant (re)start: progress resumes after ``restart_s``, at the ground-truth rates."""
        delay = self._first_start.pop(js.name, self.restart_s)
        js.run_from = max(now + delay, self._ready_at.pop(js.name, 0.0))
        js.last_update = now
        rates = begin(js, alloc, self.perf)   # the allocation carries its layout from here on
        self.usage.started(js.name, alloc.gpu_type, alloc.num_gpus, now, js.allocation.layout)
        if self._noise is not None:
            rates = rates * self._noise[js.job_index]
        js.rates = rates
        js.measured_speed = float(np.mean(rates)) / js.target
        self._project(js)

    # -- the simulator's `Clock` and events ------------------------------------------------------
    def now(self) -> float:
        return self.engine.now

    def wake_at(self, at: float, kind: str) -> None:
        self.engine.schedule(at, kind)

    def _levels(self, now: float, used: int, waiting: int) -> None:
        """Record GPUs in use and queue length: means for the metrics, change points for plots."""
        self.gpus_used.update(now, used)
        self.queue_len.update(now, waiting)

    def _arrive(self, now: float, i: int) -> None:
        job = self.workload.jobs[i]
        js = JobState(job=job, submitted_s=now, target=self.perf.target(job), last_update=now, job_index=i)
        self.loop.submit(js, now)

    def _finish(self, now: float, js: JobState) -> None:
        js.finish_token = None
        self.advance(js, now)
        js.progress = js.target
        self.loop.complete(js, now)

    def _fault(self, now: float, payload) -> None:
        name, lost, recovery_s = (*payload, 0.0)[:3]
        js = self.loop.running.get(name)
        if js is None:
            return
        self._ready_at[name] = now + recovery_s
        self.advance(js, now)
        js.progress = max(0.0, js.progress - lost)
        self.loop.lose(js, now)
        self.stop(js, now)

    def _node_lost(self, now: float, node: int) -> None:
        for js in [js for js in self.loop.running.values() if any(i == node for i, _ in js.allocation.placement)]:
            self.advance(js, now)
            self.loop.lose(js, now)
            self.stop(js, now)
        self.loop.lose_node(node, now)

    def run(self) -> SimResult:
        wall = time.perf_counter()
        self.engine = Engine()
        self.usage = UsageLog()
        self.gpus_used = TimeAverage(sample_every=0.0)
        self.queue_len = TimeAverage(sample_every=0.0)
        self.loop = loop = ControlLoop(self.cluster, self.policy, self.policy_perf, self, self, self._levels)
        for i, job in enumerate(self.workload.jobs):
            self.engine.schedule(job.arrival_s, "arrive", i)
        for t, name, *rest in self.faults:
            self.engine.schedule(t, "fault", (name, *rest))
        for t, node in self.node_losses:   # after a fault at the same time (it carries the lost progress)
            self.engine.schedule(t, "node-lost", node)
        end = self.engine.run({"arrive": self._arrive, "finish": self._finish, "fault": self._fault,
                               "node-lost": self._node_lost,
                               "round": lambda now, _: loop.on_round(now),
                               "tick": lambda now, _: loop.on_tick(now)})
        apps = {j.application for j in self.workload.jobs if j.application}
        notes = (list(self.workload.notes) + self.perf.assumptions(apps)
                 + (self.perf.specs.spec_assumptions() if hasattr(self.perf, "specs") else [])
                 + self.policy.describe())
        notes.append(self.policy_perf.describe() if self.policy_perf is not self.perf
                     else "policies see the measured speed model (an oracle, as in Pollux's simulator)")
        notes.append(f"restart/rescale overhead {self.restart_s:g} s per allocation change; seed {self.seed}")
        return SimResult(self.policy.name, self.cluster, loop.jobs, loop.decision_s, self.gpus_used,
                         self.queue_len, end, self.engine.events_processed, time.perf_counter() - wall,
                         self.seed, self.restart_s, notes, model_s=loop.model_s,
                         solver=self.policy.solver.summary() if self.policy.solver is not None else None,
                         usage=self.usage)


def simulate(cluster: ClusterSpec, workload: Workload, policy: Policy, **kwargs) -> SimResult:
    return ClusterSimulator(cluster, workload, policy, **kwargs).run()
