"""A rental job stream run by the general cluster simulator on an unbounded pay-per-use cluster.

The second of two paths to the same numbers (issue 5 item 4: "an unbounded, pay-per-use cloud is
one kind of cluster"): the stream of `gpuwise.sim.cloud` becomes moldable `TraceJob`s (single-GPU
work, speedup s_i), the rental policy runs through the ONE policy interface
(`gpuwise.policies.rental.FixedWidthScheduler`) in `gpuwise.sim.cluster.ClusterSimulator`, and
the result is reported as a `CloudResult` so the two can be compared field by field. Both give
the same response times and rented GPUs on the same seeded stream (tests/test_sched_unbounded.py);
`gpuwise.sim.cloud` remains the path for 10^6 jobs, this one proves the policy runs unchanged
where the scheduler's policies run. Boot delay maps onto the simulator's restart delay (held and
billed, no progress); billing increments and instance sizes exist only in `gpuwise.sim.cloud`.
"""

from __future__ import annotations

import math
import time as _time

import numpy as np

from gpuwise.errors import InputError
from gpuwise.sim.cloud import CloudConfig, CloudResult, Workload, per_type_means, time_quantile
from gpuwise.sim.stats import mean_ci

HOUR_S = 3600.0  # the rental model's time unit (sizes in single-GPU hours, rates per hour)


def rental_jobs(types, workload: Workload):
    """The stream as cluster-simulator jobs: seconds, single-GPU work, the type's speedup."""
    from gpuwise.workload.traces import TraceJob, Workload as TraceWorkload

    jobs = tuple(TraceJob(name=f"{types[i].name}-{j}", arrival_s=float(a) * HOUR_S, num_gpus=1,
                          duration_s=float(x) * HOUR_S, row=j + 1, speedup=types[i].speedup,
                          job_type=types[i].name)
                 for j, (a, i, x) in enumerate(zip(workload.arrival.tolist(), workload.type_idx.tolist(),
                                                   workload.size.tolist())))
    return TraceWorkload(jobs, workload.source, "rental",
                         ("moldable jobs: single-GPU work / s_i(k) on k GPUs (the rental model)",))


def simulate_on_cluster(types, policy, workload: Workload, config: CloudConfig = CloudConfig(),
                        rng: np.random.Generator | None = None, batches: int = 30,
                        gpu: str = "A100", gpus_per_machine: int = 8) -> CloudResult:
    """Run the stream under the rental ``policy`` on an unbounded cluster of ``gpu`` machines with
    ``gpus_per_machine`` GPUs (which GPU does not change the speed: sizes are single-GPU work)."""
    from gpuwise.hardware.cluster import canonical_gpu, unbounded_cluster
    from gpuwise.policies.rental import FixedWidthScheduler
    from gpuwise.sim.cluster import ClusterSimulator

    if config.billing_increment > 0 or config.minimum_charge > 0 or config.instance_sizes:
        raise InputError("cloud model", "billing rules / instance sizes",
                         "the cluster path models the boot delay only; use gpuwise.sim.cloud for these")
    started = _time.perf_counter()
    rng = rng or np.random.default_rng(0)
    cluster = unbounded_cluster([(canonical_gpu(gpu), gpus_per_machine)], name="pay-per-use")
    sched = FixedWidthScheduler(policy, [t.name for t in types], rng)
    sim = ClusterSimulator(cluster, rental_jobs(types, workload), sched,
                           restart_s=config.boot_delay * HOUR_S)
    res = sim.run()

    n = len(res.jobs)
    arrival = workload.arrival
    response = np.array([(js.finish_s - js.submitted_s) / HOUR_S for js in res.jobs])  # arrival order
    horizon = float(arrival[-1]) if n > 1 else float(arrival[0] + response[0])
    # rented level as a step function in hours, measured over [0, last arrival] like sim.cloud
    times = np.array([t for t, _ in res.gpu_series]) / HOUR_S
    levels = np.array([v for _, v in res.gpu_series], float)
    edges = np.linspace(0.0, horizon, batches + 1)
    per_batch = np.diff(_area_until(times, levels, edges)) / np.diff(edges)
    # level held on each interval between changes (0 before the first), clipped to [0, horizon]
    held = np.concatenate(([0.0], levels))
    dwell = np.diff(np.clip(np.concatenate(([0.0], times, [horizon])), 0.0, horizon))
    per_type = per_type_means(response, workload.type_idx, len(types))
    gpu_hours = res.gpus_used.integral(res.end_s) / HOUR_S
    notes = config.describe() + [
        f"{n} jobs ({workload.source} arrivals) on the cluster simulator, {cluster.describe()}; "
        f"CIs are 95% batch means over {batches} batches",
        "time-average GPUs measured over [0, last arrival]; billed GPU-hours include the final jobs' tails",
    ] + sched.describe()
    return CloudResult(
        policy=policy.name, jobs=n, horizon=horizon, mean_response_time=mean_ci(response, batches=batches),
        per_type_response_time=per_type, mean_gpus_rented=mean_ci(per_batch, batches=batches),
        mean_gpus_billed=gpu_hours / horizon if horizon > 0 else math.nan,
        p95_gpus=time_quantile(held, dwell, 0.95), p99_gpus=time_quantile(held, dwell, 0.99),
        p_zero=float(dwell[held == 0].sum() / max(horizon, 1e-300)),
        events=res.events, wall_s=_time.perf_counter() - started, assumptions=tuple(notes))


def _area_until(times: np.ndarray, levels: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Integral from 0 to each of ``at`` of the step function that is 0 before ``times[0]`` and
    ``levels[j]`` on [times[j], times[j+1])."""
    if times.size == 0:
        return np.zeros_like(at)
    seg = np.diff(times) * levels[:-1]
    cum = np.concatenate(([0.0], np.cumsum(seg)))          # area up to times[j]
    j = np.searchsorted(times, at, side="right") - 1      # last change at or before each point
    out = np.where(j >= 0, cum[np.maximum(j, 0)] + levels[np.maximum(j, 0)] * (at - times[np.maximum(j, 0)]), 0.0)
    return out
