"""What each job of a simulated run received: when it first started, every allocation it ran on,
and its GPU-seconds per GPU type. The simulator records; `gpuwise.sim.metrics` reports."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JobUsage:
    first_start_s: float | None = None
    allocations: list[tuple] = field(default_factory=list)  # (start time, GPU type, GPUs, layout or None)
    gpu_s: dict[str, float] = field(default_factory=dict)                   # GPU type -> GPU-seconds


class UsageLog:
    """Per job name: its `JobUsage`; per GPU type: GPU-seconds allocated over the run."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobUsage] = {}
        self.gpu_s_by_type: dict[str, float] = {}

    def started(self, name: str, gpu_type: str, gpus: int, now: float, layout: str | None = None) -> None:
        u = self.jobs.setdefault(name, JobUsage())
        if u.first_start_s is None:
            u.first_start_s = now
        u.allocations.append((now, gpu_type, gpus, layout))

    def held(self, name: str, gpu_type: str, gpus: int, seconds: float) -> None:
        if seconds <= 0 or gpus <= 0:
            return
        u = self.jobs.setdefault(name, JobUsage())
        u.gpu_s[gpu_type] = u.gpu_s.get(gpu_type, 0.0) + gpus * seconds
        self.gpu_s_by_type[gpu_type] = self.gpu_s_by_type.get(gpu_type, 0.0) + gpus * seconds
