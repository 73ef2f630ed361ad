"""Backends the scheduler loop drives: where decided allocations are carried out.

The scheduler records every decision before it calls a backend, and reads progress back from it.
`SimBackend` runs jobs in simulated time (the simulator's ground truth, accelerated clock);
`gpuwise.jobqueue.ray_backend.RayBackend` trains them for real on the Ray runtime (issue 12).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import numpy as np

from gpuwise.errors import InputError
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.policies.base import Allocation, JobState
from gpuwise.sim.cluster import DEFAULT_RESTART_S, accrue, begin
from gpuwise.workload.jobspec import JobSpec
from gpuwise.workload.traces import TraceJob

BACKENDS = ("sim", "ray")


class Backend(Protocol):
    """What the scheduler needs from an executor of allocations."""

    name: str
    cluster: ClusterSpec
    perf: object                                  # the PerfModel policies see
    lost_nodes: list[tuple[float, int]]           # (time, cluster node) of machines that died, in order

    def now(self) -> float: ...                   # backend clock, seconds
    def set_clock(self, t: float) -> None: ...    # resume the clock where the store left it
    def check(self, spec: JobSpec, cluster: ClusterSpec | None = None) -> JobSpec: ...
    # at submission: the spec as run on ``cluster`` (the surviving nodes; InputError: cannot run it)
    def trace_job(self, row: dict, spec_path: str) -> TraceJob: ...  # a recorded job as policies see it
    def launch(self, js: JobState, alloc: Allocation, now: float) -> None: ...  # start / rescale / resume
    def stop(self, js: JobState, now: float) -> None: ...                       # release (preempt, cancel)
    def tick(self, now: float) -> None: ...                                     # once per round, before polls
    def poll(self, js: JobState, now: float) -> None: ...                       # bring progress up to date
    def describe(self) -> list[str]: ...
    def close(self) -> None: ...                  # end the backend's workers (server exit)


class SimBackend:
    """Jobs advance with the simulator's ground truth (`GroundTruthPerf`) on a clock running
    ``time_scale`` simulated seconds per wall second; every allocation change costs ``restart_s``
    simulated seconds without progress, as in `gpuwise simulate`."""

    name = "sim"

    def __init__(self, cluster: ClusterSpec, time_scale: float = 60.0, restart_s: float = DEFAULT_RESTART_S):
        from gpuwise.sim.ground_truth import GroundTruthPerf

        if not time_scale > 0:
            raise InputError("--time-scale", time_scale, "give a positive number of simulated seconds per second")
        self.cluster, self.time_scale, self.restart_s = cluster, float(time_scale), float(restart_s)
        self.perf = GroundTruthPerf(cluster)
        self.lost_nodes: list[tuple[float, int]] = []   # simulated machines never die
        self._base_sim, self._base_wall = 0.0, time.monotonic()

    def now(self) -> float:
        return self._base_sim + (time.monotonic() - self._base_wall) * self.time_scale

    def set_clock(self, t: float) -> None:
        self._base_sim, self._base_wall = float(t), time.monotonic()

    def check(self, spec: JobSpec, cluster: ClusterSpec | None = None) -> JobSpec:
        return spec     # any spec the prediction accepts: its speed comes from the same goodput object

    def trace_job(self, row: dict, spec_path: str) -> TraceJob:
        return TraceJob(name=row["id"], arrival_s=row["submitted_sim"] or 0.0, num_gpus=row["request_gpus"],
                        gpu_type=row["gpu_type"], jobspec=spec_path,
                        batch_size=(row["prediction"].get("chosen") or {}).get("global_batch"))

    def tick(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass

    def launch(self, js: JobState, alloc: Allocation, now: float) -> None:
        rates = begin(js, alloc, self.perf)
        js.rates = rates
        js.measured_speed = float(np.mean(rates)) / js.target
        js.run_from = now + self.restart_s
        js.last_update = now

    def stop(self, js: JobState, now: float) -> None:
        self.poll(js, now)
        js.rates, js.measured_speed = None, None

    def poll(self, js: JobState, now: float) -> None:
        accrue(js, now, js.job.application is None)   # job-spec jobs: one rate, as in the simulator

    def describe(self) -> list[str]:
        return [f"sim backend: {self.time_scale:g} simulated seconds per wall second; job speed from the "
                f"goodput object of each job spec (the simulator's ground truth); {self.restart_s:g} s "
                "without progress per allocation change"]


def make_backend(name: str, cluster: ClusterSpec, time_scale: float = 60.0, state_dir: Path | None = None,
                 address: str | None = None, lost: tuple[int, ...] = ()) -> Backend:
    """``state_dir``: the Ray backend's runtime state (checkpoints); ``address``: an existing Ray cluster;
    ``lost``: nodes the store records as lost (the Ray backend starts no workers there)."""
    if name == "sim":
        return SimBackend(cluster, time_scale)
    if name == "ray":
        from gpuwise.jobqueue.ray_backend import RayBackend, RayOptions

        if state_dir is None:
            raise InputError("--db", None, "the Ray backend keeps checkpoints next to the store; give a file store")
        return RayBackend(cluster, RayOptions(Path(state_dir), address, lost=tuple(lost)))
    raise InputError("--backend", name, "use " + " or ".join(BACKENDS))
