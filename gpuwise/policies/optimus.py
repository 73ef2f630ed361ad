"""Optimus+Oracle (Peng et al., EuroSys'18, as the Pollux paper's baseline): GPUs by marginal gain.

Each job keeps its user's batch (Optimus does not tune it; the Pollux workloads' batches are the
tuned ones). With an oracle for speed and job length, a job's remaining time at g GPUs is
(1 - fraction done) / goodput(g). Every job in the pool first gets the fewest GPUs on which it
runs (arrival order, while GPUs last); then GPUs go one step at a time to the job whose remaining
time falls most per extra GPU, until no step helps or the GPUs run out. One pool per GPU type
(`pools.type_pools`); best-fit placement. Re-decided every ``interval_s`` and on
arrivals/completions (no more often than that).
"""

from __future__ import annotations

import heapq

import numpy as np

from gpuwise.policies.base import Decision, JobState, PerfModel, Policy, SchedView
from gpuwise.policies.placement import best_fit, place_shares
from gpuwise.policies.pools import type_pools
from gpuwise.policies.value import value_table


def remaining_time(js: JobState, perf: PerfModel, gpu: str, cap: int, gpn: int) -> tuple[np.ndarray, int | None]:
    """(remaining seconds at g = 0..cap GPUs, inf where it cannot run; the batch used)."""
    v, b, ref = value_table(perf, js, gpu, cap, gpn, elastic=False, objective="job")
    good = np.where(np.isfinite(v), v * ref, 0.0)
    left = max(1.0 - js.fraction_done, 0.0)
    with np.errstate(divide="ignore"):
        t = np.where(good > 0, left / np.where(good > 0, good, 1.0), np.inf)
    return t, (None if js.job.rigid else int(b[1]) if cap >= 1 else None)


def marginal_gain(times: list[np.ndarray], capacity: int) -> list[int]:
    """Optimus' greedy: minimum runnable count per job in order, then +1 GPU steps by the largest
    cut in remaining time per GPU (a step may jump to the next runnable count)."""
    free = capacity
    gs = [0] * len(times)
    for j, t in enumerate(times):
        ok = np.flatnonzero(np.isfinite(t[1:])) + 1
        if len(ok) and ok[0] <= free:
            gs[j] = int(ok[0])
            free -= gs[j]
    heap = []

    def push(j: int) -> None:
        t, g = times[j], gs[j]
        nxt = np.flatnonzero(np.isfinite(t[g + 1: g + 1 + free])) + g + 1
        if len(nxt):
            n = int(nxt[0])
            gain = (t[g] - t[n]) / (n - g)
            if gain > 0:
                heapq.heappush(heap, (-gain, j, n))

    for j in range(len(times)):
        if gs[j]:
            push(j)
    while heap and free > 0:
        _, j, n = heapq.heappop(heap)
        if n - gs[j] > free:
            continue
        free -= n - gs[j]
        gs[j] = n
        push(j)
    return gs


class Optimus(Policy):
    name = "optimus"
    needs_progress = True

    def __init__(self, interval_s: float = 60.0):
        self.min_interval_s = self.period_s = float(interval_s)  # the Pollux simulator's interval

    def describe(self) -> list[str]:
        return [f"optimus: Optimus+Oracle, user's batch, true speed and job length; minimum GPUs per job, then "
                f"+GPU steps by largest cut in remaining time; every {self.period_s:g} s; best-fit nodes"]

    def schedule(self, now: float, view: SchedView, perf: PerfModel) -> Decision:
        spec, caps = view.cluster.spec, view.cluster.capacity_by_type()   # less once a node is lost
        shares = {}
        for gpu, jobs in type_pools(view, perf).items():
            cap, gpn = caps[gpu], spec.max_gpus_per_node(gpu)
            if not jobs or cap < 1:
                continue
            tb = [remaining_time(js, perf, gpu, cap, gpn) for js in jobs]
            for js, g, (_, batch) in zip(jobs, marginal_gain([t for t, _ in tb], cap), tb):
                if g:
                    shares[js.name] = (gpu, g, batch)
        return Decision(place_shares(view, shares, best_fit))
