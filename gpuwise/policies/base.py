"""THE scheduling-policy interface, shared by the simulator and the (later) Ray runtime.

A policy is called with the time ``now`` (simulated or wall-clock seconds -- the policy never
reads a clock itself), a `SchedView` of the jobs and the cluster, and a `PerfModel` that predicts
a job's goodput. It returns a `Decision`: new allocations (GPU type, GPUs per node, batch) for
the jobs whose allocation changes, and the new jobs it refuses (admission). Jobs it does not
mention keep what they have. The caller applies the decision and owns all state.

Policies are built from three small swappable parts (Blox's lesson): an `Admission` rule
(admission.py), an allocator that decides *how many GPUs of which type and which batch* each
job gets, and a `Placement` (placement.py) that maps counts onto nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gpuwise.hardware.cluster import ClusterSpec

if TYPE_CHECKING:
    from gpuwise.workload.traces import TraceJob


@dataclass(frozen=True)
class Allocation:
    """Where and how a job runs: one GPU type, GPUs per node, global batch."""

    gpu_type: str
    placement: tuple[tuple[int, int], ...]  # (node index in ClusterSpec.nodes, GPUs on it), sorted
    batch_size: int | None = None            # global batch; None for rigid jobs without one
    # the parallel layout the job runs with on this allocation (job-spec jobs: the goodput object's choice,
    # e.g. "dp4 tp2 zero3, recompute op, micro 1 x accum 8"); None for data-parallel fitted jobs. Not part
    # of equality: a policy that keeps a job's GPUs and batch keeps its layout.
    layout: str | None = field(default=None, compare=False)

    @property
    def num_gpus(self) -> int:
        return sum(g for _, g in self.placement)

    @property
    def num_nodes(self) -> int:
        return len(self.placement)


@dataclass(eq=False)
class JobState:
    """What a policy sees of one job. The simulator/runtime creates and updates it."""

    job: "TraceJob"                     # the job as submitted (application, requested GPUs, batch...)
    submitted_s: float                  # arrival time
    target: float                       # work to do (iterations at the reference batch, or seconds)
    progress: float = 0.0               # work done, same unit as target (up to date at each call)
    allocation: Allocation | None = None
    attained_gpu_s: float = 0.0         # GPU-seconds received so far (Tiresias' attained service)
    measured_speed: float | None = None  # fraction of the job per second at the current allocation
    restarts: int = 0
    status: str = "pending"             # pending | running | done | dropped
    finish_s: float | None = None
    # simulator bookkeeping (not for policies)
    run_from: float = 0.0               # progress accrues from here (after a restart delay)
    last_update: float = 0.0
    rates: object = None
    finish_token: int | None = None
    job_index: int = -1

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def fraction_done(self) -> float:
        return self.progress / self.target if self.target > 0 else 1.0


class ClusterState:
    """Free GPUs per node; every change goes through `allocate`/`release`, which check capacity.

    On an unbounded (pay-per-use) cluster the node list is a pool that grows: `fresh_placement`
    names machines after the existing ones and `allocate` creates them, so a policy planning on a
    `copy` and the caller applying the same decision afterwards create the same machines."""

    __slots__ = ("spec", "free", "cap", "_node_gpu")

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.free = [n.gpus for n in spec.nodes]
        self.cap = list(self.free)  # GPUs per node (grows with the pool when unbounded)
        self._node_gpu = [n.gpu for n in spec.nodes]

    def copy(self) -> "ClusterState":
        c = ClusterState.__new__(ClusterState)
        c.spec, c.free, c.cap = self.spec, list(self.free), list(self.cap)
        c._node_gpu = list(self._node_gpu) if self.spec.unbounded else self._node_gpu
        return c

    @property
    def unbounded(self) -> bool:
        return self.spec.unbounded

    def node_gpu(self, i: int) -> str:
        return self._node_gpu[i]

    def nodes_of(self, gpu: str) -> list[int]:
        return [i for i, t in enumerate(self._node_gpu) if t == gpu]

    def free_by_type(self) -> dict[str, int]:
        out = {t: 0 for t in self.spec.gpu_types}
        for t, f in zip(self._node_gpu, self.free):
            out[t] += f
        return out

    def capacity_by_type(self) -> dict[str, int]:
        if self.spec.unbounded:
            return {t: self.spec.gpus_of_type(t) for t in self.spec.gpu_types}
        out = {t: 0 for t in self.spec.gpu_types}
        for t, c in zip(self._node_gpu, self.cap):  # a lost node counts no more (`remove_node`)
            out[t] += c
        return out

    def remove_node(self, i: int) -> None:
        """Node ``i`` is gone for good (its machine died): no capacity, nothing placed on it again.
        GPUs still booked there stay booked (negative free) until their jobs are released."""
        self.free[i] -= self.cap[i]
        self.cap[i] = 0

    def used(self) -> int:
        return sum(self.cap) - sum(self.free)

    def fresh_placement(self, gpu: str, n: int) -> tuple[tuple[int, int], ...]:
        """Unbounded clusters only: ``n`` GPUs of ``gpu`` on new machines (full ones first),
        numbered after the existing nodes. Nothing is created until `allocate`."""
        gpn = self.spec.max_gpus_per_node(gpu)
        if not self.spec.unbounded or gpn < 1 or n < 1:
            raise ValueError(f"cannot create {n} {gpu} GPUs on cluster {self.spec.name}")
        first = len(self.free)
        return tuple((first + j, min(gpn, n - j * gpn)) for j in range(-(-n // gpn)))

    def _grow(self, alloc: Allocation) -> None:
        top = max(i for i, _ in alloc.placement)
        gpn = self.spec.max_gpus_per_node(alloc.gpu_type)
        if top >= len(self.free) and gpn < 1:
            raise ValueError(f"cluster {self.spec.name} rents no {alloc.gpu_type}")
        while len(self.free) <= top:
            self.free.append(gpn)
            self.cap.append(gpn)
            self._node_gpu.append(alloc.gpu_type)

    def allocate(self, alloc: Allocation) -> None:
        if self.spec.unbounded:
            self._grow(alloc)
        for i, g in alloc.placement:
            if self._node_gpu[i] != alloc.gpu_type:
                raise ValueError(f"node {i} has {self._node_gpu[i]}, not {alloc.gpu_type}")
            if g < 1 or g > self.free[i]:
                raise ValueError(f"node {i}: asked {g} GPUs, {self.free[i]} free")
        for i, g in alloc.placement:
            self.free[i] -= g

    def release(self, alloc: Allocation) -> None:
        for i, g in alloc.placement:
            self.free[i] += g
            if self.free[i] > self.cap[i]:
                raise ValueError(f"node {i}: released more GPUs than it has")


@dataclass
class SchedView:
    """The jobs and the cluster as a policy sees them (live objects: read, don't modify)."""

    pending: dict[str, JobState]        # waiting jobs in arrival order (includes the new ones)
    running: dict[str, JobState]        # jobs holding GPUs
    cluster: ClusterState
    new: list[str] = field(default_factory=list)  # names of jobs that arrived since the last call

    def active(self) -> list[JobState]:
        """Running jobs first (in start order), then pending ones in arrival order."""
        return list(self.running.values()) + list(self.pending.values())


@dataclass
class Decision:
    """A policy's answer: allocation changes (None = stop/preempt) and refused new jobs."""

    allocations: dict[str, Allocation | None] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)


def job_batch_range(job: "TraceJob", lo: int, hi: int) -> tuple[int, int]:
    """The job's global batch range: its own min/max where given (else the model's ``lo``/``hi``),
    widened to hold its requested batch. Shared by every `PerfModel`, so all agree on it."""
    lo, hi = job.min_batch or lo, job.max_batch or hi
    if job.batch_size:
        lo, hi = min(lo, job.batch_size), max(hi, job.batch_size)
    return int(lo), int(hi)


class PerfModel(Protocol):
    """Predicted speed of a job -- the seam between policies and the performance model.

    The simulator passes its ground truth (an oracle, as in Pollux's simulator); the runtime will
    pass a model fitted online. Arrays broadcast together.
    """

    def batch_range(self, job: "TraceJob", gpu_type: str) -> tuple[int, int, int]:
        """(smallest, largest global batch, largest per-GPU batch that fits on ``gpu_type``)."""
        ...

    def goodput_grid(self, js: JobState, gpu_type: str, max_gpus: int, gpus_per_node: int,
                     batches: tuple[int, ...], accumulate: bool = False) -> np.ndarray:
        """Fraction of the job completed per second with g = 1..max_gpus GPUs of ``gpu_type``
        packed on ceil(g/gpus_per_node) nodes (rows) at each global batch (columns); 0 where the
        configuration is infeasible (per-GPU batch does not fit, or a rigid job's size differs).
        ``accumulate=True``: a per-GPU batch that does not fit runs as ceil(local/limit)
        micro-steps of gradient accumulation instead of being infeasible."""
        ...


class Policy:
    """Base class: subclasses implement `schedule`.

    Triggers: the caller calls `schedule` after arrivals and completions, no more often than
    every ``min_interval_s``, and additionally every ``period_s`` if set (e.g. LAS rounds).
    """

    name = "policy"
    min_interval_s: float = 0.0
    period_s: float | None = None
    needs_progress: bool = False  # ask the caller to bring every running job's progress up to date
    unbounded_ok: bool = False    # sound on an unbounded cluster (capacity planners are not: no capacity)
    solver = None                 # a `solver.SolverLog` where rounds solve a program (HiGHS's outcomes)

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        raise NotImplementedError

    def describe(self) -> list[str]:
        """Assumptions / parameters of this policy, for the output."""
        return []


def check_decision(view: SchedView, decision: Decision) -> None:
    """Raise if applying ``decision`` would exceed any node's capacity (used by tests and the sim)."""
    state = view.cluster.copy()
    jobs = {**view.pending, **view.running}
    for name, alloc in decision.allocations.items():
        cur = jobs[name].allocation
        if cur is not None:
            state.release(cur)
    for name, alloc in decision.allocations.items():
        if alloc is not None:
            state.allocate(alloc)
