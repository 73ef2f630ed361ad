"""What a chunk measures: step time, sync time and the gradient noise scale.

The model wrapper installs a DDP communication hook that all-reduces each gradient bucket itself,
synchronously: the time spent there is the step's sync time (no overlap with the backward pass, so
compute and communication are measured apart, as the runtime's own workers do), and it sees each
bucket before and after the average. That gives |g|^2 of a replica's local batch (B/W samples) and
of the global batch (B) every step; McCandlish et al. (2018) turn the two into unbiased |G|^2 and
tr(Sigma) (`gpuwise.estimate.stat_efficiency.gns_moments`), whose ratio is the noise scale that Pollux/AdaptDL's goodput and AdaScale read. One
replica has no second batch size: its chunks carry no noise estimate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class StepStats:
    """Per-step accumulators the hook fills; the loop reads and clears them."""

    world: int = 1
    local_sq: float = 0.0
    global_sq: float = 0.0
    sync_s: float = 0.0
    rows: list = field(default_factory=list)   # (step_s, sync_s, loss, global_sq, local_sq) per step

    def end_step(self, step_s: float, loss: float) -> None:
        self.rows.append((step_s, self.sync_s, loss, self.global_sq, self.local_sq))
        self.local_sq = self.global_sq = self.sync_s = 0.0


def allreduce_hook(stats: StepStats, bucket):
    """DDP comm hook: average the bucket's gradients, timing the collective and recording norms."""
    import torch
    import torch.distributed as dist

    buf = bucket.buffer()
    stats.local_sq += float(buf.square().sum())
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    stats.sync_s += time.perf_counter() - t0
    buf.div_(stats.world)
    stats.global_sq += float(buf.square().sum())
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut
