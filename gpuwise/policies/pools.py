"""Which GPU type's pool each job is planned in, for allocators that solve one type at a time.

A running job stays on the type it runs on (moving it costs a restart and these allocators do not
weigh types against each other); a waiting job restricted to one type goes there; any other
waiting job goes to the type, among those it can run on, with the most GPUs per job already in its
pool (ties: the larger type) -- a load-spreading rule, stated as an extension because the
homogeneous-cluster papers (elastic DP, Pollux, Optimus) have a single pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from gpuwise.policies.base import JobState, PerfModel, SchedView

if TYPE_CHECKING:
    from gpuwise.workload.traces import TraceJob


def allowed_types(job: "TraceJob", types: Iterable[str], perf: PerfModel | None) -> tuple[str, ...]:
    """The GPU types of ``types`` the job may run on: its own type if it names one; a job-spec job
    only where its model fits (a per-GPU batch limit >= 1: planning it on a type it does not fit
    would leave it pending, or start it at zero speed); any other job on every type."""
    if job.gpu_type:
        return (job.gpu_type,)
    types = tuple(types)
    if job.jobspec is None or perf is None:
        return types
    return tuple(t for t in types if perf.batch_range(job, t)[2] >= 1)


def type_pools(view: SchedView, perf: PerfModel | None = None) -> dict[str, list[JobState]]:
    """GPU type -> jobs planned on it (running first, then waiting in arrival order). With ``perf``,
    a waiting job is only planned on a type it can run on (`allowed_types`)."""
    cap = view.cluster.capacity_by_type()
    pools: dict[str, list[JobState]] = {t: [] for t in cap}
    for js in view.running.values():
        pools[js.allocation.gpu_type].append(js)
    for js in view.pending.values():
        types = allowed_types(js.job, cap, perf)
        if types:
            t = max(types, key=lambda t: (cap[t] / (1 + len(pools[t])), cap[t]))
            pools[t].append(js)
    return pools
