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
from dataclasses import dataclass, field

import numpy as np

from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.policies.base import ClusterState, Decision, JobState, Policy, SchedView
from gpuwise.sim import ground_truth as gt
from gpuwise.sim.engine import Engine, TimeAverage
from gpuwise.workload.traces import Workload, check_fits

DEFAULT_RESTART_S = 30.0  # Pollux simulator's re-allocation delay


@dataclass
class SimResult:
    """Raw outcome of one run (`gpuwise.sim.metrics.summarise` turns it into metrics)."""

    policy: str
    cluster: ClusterSpec
    jobs: list[JobState]
    decision_s: list[float]               # wall-clock seconds of every policy call
    gpus_used: TimeAverage                # mean, integral and change points of GPUs in use
    queue_len: TimeAverage                # the same for jobs waiting
    end_s: float
    events: int
    wall_s: float
    seed: int
    restart_s: float
    assumptions: list[str] = field(default_factory=list)

    @property
    def gpu_series(self) -> list[tuple[float, float]]:
        """(time, GPUs in use) at each change: the last level of each instant."""
        return self.gpus_used.samples

    @property
    def queue_series(self) -> list[tuple[float, float]]:
        """(time, jobs waiting) at each change."""
        return self.queue_len.samples


class ClusterSimulator:
    """One policy on one cluster and one workload."""

    def __init__(self, cluster: ClusterSpec, workload: Workload, policy: Policy,
                 restart_s: float = DEFAULT_RESTART_S, seed: int = 0, speed_noise: float = 0.0,
                 policy_model: str = "oracle") -> None:
        """``restart_s``: seconds lost per (re)start; ``seed``: drives ``speed_noise`` (sigma of a
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
        self.restart_s, self.seed = float(restart_s), int(seed)
        self.perf = gt.GroundTruthPerf(cluster)
        if policy_model == "oracle":
            self.policy_perf = self.perf
        elif policy_model == "fitted":
            from gpuwise.policies.job_model_perf import JobModelPerf

            self.policy_perf = JobModelPerf(inter_node_gbps=cluster.inter_node_gbps)
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
                                 f"the model fits on none of {', '.join(types)} (data parallel, tp=pp=1); "
                                 "use a cluster with larger GPUs")

    # -- progress -------------------------------------------------------------------------
    def _advance(self, js: JobState, now: float) -> None:
        if js.allocation is None:
            js.last_update = now
            return
        js.attained_gpu_s += js.allocation.num_gpus * (now - js.last_update)
        start = max(js.last_update, js.run_from)
        if now > start:
            if js.job.application is None:  # rigid and job-spec jobs: one constant rate
                js.progress = min(js.target, js.progress + (now - start) * float(js.rates[0]))
            else:
                js.progress = gt.progress_after(js.job.application, js.rates, js.progress, now - start, js.target)
        js.last_update = now

    def _project(self, js: JobState) -> None:
        if js.finish_token is not None:
            self.engine.cancel(js.finish_token)
            js.finish_token = None
        if js.allocation is None:
            return
        if js.job.application is None:
            r = float(js.rates[0])
            left = (js.target - js.progress) / r if r > 0 else math.inf
        else:
            left = gt.time_to_progress(js.job.application, js.rates, js.progress, js.target)
        if math.isfinite(left):
            js.finish_token = self.engine.schedule(js.run_from + left, "finish", js)

    # -- policy rounds ----------------------------------------------------------------------
    def _request_round(self, now: float) -> None:
        if self._round_at is not None:
            return
        at = max(now, self._last_round + self.policy.min_interval_s) if self._last_round >= 0 else now
        self._round_at = at
        self.engine.schedule(at, "round")

    def _apply(self, now: float, decision: Decision) -> None:
        for name in decision.drop:
            js = self.pending.pop(name, None)
            if js is not None:
                js.status, js.finish_s = "dropped", now
        changes = []
        for name, alloc in decision.allocations.items():
            js = self.running.get(name) or self.pending.get(name)
            if js is None or js.allocation == alloc:
                continue
            self._advance(js, now)
            if js.allocation is not None:
                self.state.release(js.allocation)
            changes.append((js, alloc))
        for js, alloc in changes:
            was_running = js.allocation is not None
            js.allocation = alloc
            if alloc is None:
                self.running.pop(js.name, None)
                self.pending[js.name] = js
                js.status, js.rates, js.measured_speed = "pending", None, None
                self._project(js)
                continue
            self.state.allocate(alloc)
            if not was_running:
                self.pending.pop(js.name, None)
                self.running[js.name] = js
            js.status = "running"
            js.restarts += 1
            js.run_from = now + self.restart_s
            js.last_update = now
            rates = self.perf.rates(js.job, alloc.gpu_type, alloc.num_gpus, alloc.num_nodes, alloc.batch_size)
            if self._noise is not None:
                rates = rates * self._noise[js.job_index]
            js.rates = rates
            js.measured_speed = float(np.mean(rates)) / js.target
            self._project(js)
        self._levels(now)

    def _levels(self, now: float) -> None:
        """Record GPUs in use and queue length: means for the metrics, change points for plots."""
        self.gpus_used.update(now, self.state.used())
        self.queue_len.update(now, len(self.pending))

    def _round(self, now: float, _payload) -> None:
        self._round_at = None
        self._last_round = now
        if self.policy.needs_progress:
            for js in self.running.values():
                self._advance(js, now)
        view = SchedView(self.pending, self.running, self.state, self._new)
        self._new = []
        t0 = time.perf_counter()
        decision = self.policy.schedule(now, view, self.policy_perf)
        self.decision_s.append(time.perf_counter() - t0)
        self._apply(now, decision)
        if self.policy.period_s and self.running and not self._tick_pending:
            self._tick_pending = True
            self.engine.schedule(now + self.policy.period_s, "tick")

    def _tick(self, now: float, _payload) -> None:
        self._tick_pending = False
        self._request_round(now)

    def _arrive(self, now: float, i: int) -> None:
        job = self.workload.jobs[i]
        js = JobState(job=job, submitted_s=now, target=self.perf.target(job), last_update=now, job_index=i)
        self.jobs.append(js)
        self.pending[job.name] = js
        self._new.append(job.name)
        self._levels(now)
        self._request_round(now)

    def _finish(self, now: float, js: JobState) -> None:
        js.finish_token = None
        self._advance(js, now)
        js.progress = js.target
        self.state.release(js.allocation)
        self.running.pop(js.name)
        js.status, js.finish_s = "done", now
        self._levels(now)
        if self.running or self.pending:
            self._request_round(now)

    def run(self) -> SimResult:
        wall = time.perf_counter()
        self.engine = Engine()
        self.state = ClusterState(self.cluster)
        self.pending: dict[str, JobState] = {}
        self.running: dict[str, JobState] = {}
        self.jobs: list[JobState] = []
        self._new: list[str] = []
        self.decision_s: list[float] = []
        self._round_at: float | None = None
        self._last_round = -1.0
        self._tick_pending = False
        self.gpus_used = TimeAverage(sample_every=0.0)
        self.queue_len = TimeAverage(sample_every=0.0)
        for i, job in enumerate(self.workload.jobs):
            self.engine.schedule(job.arrival_s, "arrive", i)
        end = self.engine.run({"arrive": self._arrive, "finish": self._finish, "round": self._round,
                               "tick": self._tick})
        apps = {j.application for j in self.workload.jobs if j.application}
        notes = (list(self.workload.notes) + self.perf.assumptions(apps) + self.perf.specs.spec_assumptions()
                 + self.policy.describe())
        notes.append(self.policy_perf.describe() if self.policy_perf is not self.perf
                     else "policies see the measured speed model (an oracle, as in Pollux's simulator)")
        notes.append(f"restart/rescale overhead {self.restart_s:g} s per allocation change; seed {self.seed}")
        return SimResult(self.policy.name, self.cluster, self.jobs, self.decision_s, self.gpus_used,
                         self.queue_len, end, self.engine.events_processed, time.perf_counter() - wall,
                         self.seed, self.restart_s, notes)


def simulate(cluster: ClusterSpec, workload: Workload, policy: Policy, **kwargs) -> SimResult:
    return ClusterSimulator(cluster, workload, policy, **kwargs).run()
