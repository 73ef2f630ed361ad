"""One control loop for every backend: when to call the policy, and how to apply its decisions.

The loop owns what policies see (pending/running `JobState`s and the `ClusterState` book of
reserved GPUs) and never reads a clock or touches a worker itself:

- a `Clock` gives the time and wakes the loop up later (the simulator's event engine; the
  runtime's wall clock);
- an `Actuator` moves jobs (the simulator's ground-truth physics; Ray workers).

Policy rounds follow `Policy`'s triggers: after arrivals and completions, no more often than
``min_interval_s``, plus every ``period_s`` while jobs run.

Applying a decision: every allocation that changes is released in the book first, then the new
ones are reserved (releases before grows), and the actuator is asked to start each. An actuator
that applies asynchronously later calls `confirm` (the job runs) or `roll_back` (it could not:
the reservation is returned and the job waits again). The actuator must time out every wait.

A `Gate` (the job service's) narrows what a round sees and makes its decision durable before it
is applied: ``admit`` picks the waiting jobs the round may consider (users' GPU quotas), ``commit``
trims the decision (quotas again) and records it, returning what may be applied. A round that
raises leaves the jobs as they were and is reported by the caller (`on_round` re-raises).
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

from gpuwise.control import status as st
from gpuwise.control.timed_perf import TimedPerf
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.policies.base import Allocation, ClusterState, Decision, JobState, PerfModel, Policy, SchedView


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the start of the run (simulated or wall-clock)."""
        ...

    def wake_at(self, at: float, kind: str) -> None:
        """Call the loop back at ``at`` with ``kind`` "round" (`on_round`) or "tick" (`on_tick`)."""
        ...


class Actuator(Protocol):
    def advance(self, js: JobState, now: float) -> None:
        """Bring ``js.progress`` and ``js.attained_gpu_s`` up to ``now``."""
        ...

    def stop(self, js: JobState, now: float) -> None:
        """``js`` lost its allocation (already released in the book): stop its workers."""
        ...

    def start(self, js: JobState, alloc: Allocation, now: float) -> None:
        """(Re)start ``js`` on ``alloc`` (already reserved). A synchronous backend is done on
        return; an asynchronous one sets ``js.status`` to starting/rescaling and later calls
        `ControlLoop.confirm` or `ControlLoop.roll_back`."""
        ...


class Gate(Protocol):
    def admit(self, pending: dict[str, JobState]) -> dict[str, JobState]:
        """The waiting jobs this round's policy call may consider (in order)."""
        ...

    def commit(self, now: float, decision: Decision) -> Decision:
        """Trim ``decision`` and record it; returns what the loop applies."""
        ...


def lost_node(cluster: ClusterSpec, node: int, now: float) -> dict:
    """The record of a node whose machine died at ``now`` (`ControlLoop.lost_nodes`)."""
    spec = cluster.nodes[node]
    return {"t": round(now, 3), "node": node, "name": spec.node_id, "gpu_type": spec.gpu, "gpus": spec.gpus}


class ControlLoop:
    """Pending and running jobs, the reservation book, and the policy's rounds."""

    def __init__(self, cluster: ClusterSpec, policy: Policy, perf: PerfModel, clock: Clock,
                 actuator: Actuator, on_levels: Callable[[float, int, int], None] | None = None,
                 gate: Gate | None = None) -> None:
        """``perf``: the speed model policies read; ``on_levels(now, GPUs reserved, jobs waiting)``
        is called at every change (the backend's utilisation and queue metrics); ``gate``: see the
        module docstring (None: every waiting job, decisions applied as they are)."""
        self.policy, self.clock, self.actuator = policy, clock, actuator
        self.perf = TimedPerf(perf)   # decision time excludes the model's evaluation (reported apart)
        self.state = ClusterState(cluster)
        self.pending: dict[str, JobState] = {}
        self.running: dict[str, JobState] = {}
        self.jobs: list[JobState] = []
        self.decision_s: list[float] = []   # the policy's own seconds per round (model evaluation excluded)
        self.model_s: list[float] = []      # seconds per round spent evaluating the PerfModel for the policy
        self._new: list[str] = []
        self._round_at: float | None = None
        self._last_round = -1.0
        self._tick_pending = False
        self._on_levels = on_levels
        self.gate = gate
        self.lost_nodes: list[dict] = []    # nodes whose machine died (`lose_node`), in order

    # -- jobs entering and leaving ----------------------------------------------------------
    def submit(self, js: JobState, now: float, new: bool = True) -> None:
        """``new=False``: a job restored after a restart (policies do not see it as an arrival)."""
        self.jobs.append(js)
        self.pending[js.name] = js
        js.status = st.PENDING
        if new:
            self._new.append(js.name)
        self.levels(now)
        self.request_round(now)

    def resume(self, js: JobState, alloc: Allocation, now: float) -> None:
        """Put ``js`` back on the GPUs it held before a restart: booked, then (re)started."""
        self.jobs.append(js)
        self.state.allocate(alloc)
        js.allocation = alloc
        self.running[js.name] = js
        js.status = st.STARTING
        self.actuator.start(js, alloc, now)
        self.levels(now)

    def cancel(self, js: JobState, now: float) -> None:
        """Its user withdrew ``js``: terminal, GPUs freed, its workers stopped."""
        held = js.allocation is not None
        if held:
            self.actuator.advance(js, now)
        self._end(js, now, st.CANCELLED, keep_allocation=False)
        if held:
            self.actuator.stop(js, now)

    def complete(self, js: JobState, now: float) -> None:
        """``js`` reached its target (progress already final): free its GPUs (a runtime job may
        finish its last chunk after the policy took its allocation away)."""
        self._end(js, now, st.DONE, keep_allocation=True)

    def lose(self, js: JobState, now: float, status: st.Status = st.PREEMPTED) -> None:
        """A fault took ``js``'s workers (preemption, dead worker): it waits for new GPUs."""
        if js.allocation is not None:
            self.state.release(js.allocation)
        js.allocation = None
        self.running.pop(js.name, None)
        self.pending[js.name] = js
        js.status = status
        self.levels(now)
        self.request_round(now)

    def lose_node(self, node: int, now: float) -> None:
        """Node ``node``'s machine died (its jobs were already `lose`-d by the actuator): the book
        drops its GPUs for the rest of the run, so no policy places a job there again."""
        self.state.remove_node(node)
        self.lost_nodes.append(lost_node(self.state.spec, node, now))
        self.levels(now)
        self.request_round(now)

    def fail(self, js: JobState, now: float) -> None:
        """Give up on ``js`` (its backend could not keep it running): terminal, GPUs freed."""
        self._end(js, now, st.FAILED, keep_allocation=False)

    def _end(self, js: JobState, now: float, status: st.Status, keep_allocation: bool) -> None:
        """A terminal status: GPUs freed (a done job keeps its last allocation as a record), a new
        round while other jobs remain."""
        if js.allocation is not None:
            self.state.release(js.allocation)
        if not keep_allocation:
            js.allocation = None
        self.running.pop(js.name, None)
        self.pending.pop(js.name, None)
        js.status, js.finish_s = status, now
        self.levels(now)
        if self.running or self.pending:
            self.request_round(now)

    # -- asynchronous application -------------------------------------------------------------
    def confirm(self, js: JobState, now: float) -> None:
        """The actuator reports ``js`` running on its reserved allocation."""
        if js.allocation is not None and js.status in st.HOLDS_GPUS:
            js.status = st.RUNNING

    def roll_back(self, js: JobState, now: float, reason: str = "") -> None:
        """The actuator could not apply ``js``'s allocation (timeout, no workers): return the
        reservation; the job waits for the next round."""
        self.lose(js, now, st.PENDING)

    # -- policy rounds -------------------------------------------------------------------------
    def request_round(self, now: float) -> None:
        if self._round_at is not None:
            return
        at = max(now, self._last_round + self.policy.min_interval_s) if self._last_round >= 0 else now
        self._round_at = at
        self.clock.wake_at(at, "round")

    def on_round(self, now: float) -> None:
        self._round_at = None
        self._last_round = now
        if self.policy.needs_progress:
            for js in self.running.values():
                self.actuator.advance(js, now)
        pending = self.pending if self.gate is None else self.gate.admit(self.pending)
        new = self._new if self.gate is None else [n for n in self._new if n in pending]
        view = SchedView(pending, self.running, self.state, new)
        t0, m0 = time.perf_counter(), self.perf.seconds
        decision = self.policy.schedule(now, view, self.perf)
        model = self.perf.seconds - m0
        self.model_s.append(model)
        self.decision_s.append(max(0.0, time.perf_counter() - t0 - model))
        if self.gate is not None:
            decision = self.gate.commit(now, decision)
        # jobs a quota held back stay new until a round considers them
        self._new = [] if self.gate is None else [n for n in self._new if n not in pending]
        self.apply(now, decision)
        if self.policy.period_s and self.running and not self._tick_pending:
            self._tick_pending = True
            self.clock.wake_at(now + self.policy.period_s, "tick")

    def on_tick(self, now: float) -> None:
        self._tick_pending = False
        self.request_round(now)

    def apply(self, now: float, decision: Decision) -> None:
        for name in decision.drop:
            js = self.pending.pop(name, None)
            if js is not None:
                js.status, js.finish_s = st.DROPPED, now
        changes = []
        for name, alloc in decision.allocations.items():
            js = self.running.get(name) or self.pending.get(name)
            if js is None or js.allocation == alloc:
                continue
            self.actuator.advance(js, now)
            if js.allocation is not None:
                self.state.release(js.allocation)  # every release is booked before any grow
            changes.append((js, alloc))
        for js, alloc in changes:
            was_running = js.allocation is not None
            js.allocation = alloc
            if alloc is None:
                self.running.pop(js.name, None)
                self.pending[js.name] = js
                js.status = st.PENDING
                self.actuator.stop(js, now)
                continue
            self.state.allocate(alloc)
            if not was_running:
                self.pending.pop(js.name, None)
                self.running[js.name] = js
            js.status = st.RUNNING
            js.restarts += 1
            self.actuator.start(js, alloc, now)
        self.levels(now)

    def levels(self, now: float) -> None:
        if self._on_levels is not None:
            self._on_levels(now, self.state.used(), len(self.pending))
