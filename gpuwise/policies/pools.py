"""Which GPU type's pool each job is planned in, for allocators that solve one type at a time.

A running job stays on the type it runs on (moving it costs a restart and these allocators do not
weigh types against each other); a waiting job restricted to one type goes there; any other
waiting job goes to the type with the most GPUs per job already in its pool (ties: the larger
type) -- a load-spreading rule, stated as an extension because the homogeneous-cluster papers
(elastic DP, Pollux, Optimus) have a single pool.
"""

from __future__ import annotations

from gpuwise.policies.base import JobState, SchedView


def type_pools(view: SchedView) -> dict[str, list[JobState]]:
    """GPU type -> jobs planned on it (running first, then waiting in arrival order)."""
    cap = view.cluster.capacity_by_type()
    pools: dict[str, list[JobState]] = {t: [] for t in cap}
    for js in view.running.values():
        pools[js.allocation.gpu_type].append(js)
    for js in view.pending.values():
        if js.job.gpu_type:
            pools[js.job.gpu_type].append(js)
        else:
            t = max(cap, key=lambda t: (cap[t] / (1 + len(pools[t])), cap[t]))
            pools[t].append(js)
    return pools
