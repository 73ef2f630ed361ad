"""Users' GPU quotas and jobs' ``max_gpus`` around a policy round (the job service's gate).

Before the policy call, each user's waiting jobs are considered only while the user's quota has
room (`admit`); after it, a grant that would take a user over quota or a job over its max_gpus is
held back (a new job gets the same placement trimmed to the room left), and grants that no longer
fit once others were held back are dropped (`trim`).
"""

from __future__ import annotations

from typing import Callable

from gpuwise.policies.base import Allocation, ClusterState, Decision, JobState

UNLIMITED = 1 << 30


def trim_to(a: Allocation, n: int) -> Allocation:
    """The first ``n`` GPUs of a placement (a grant cut down to a quota)."""
    out, left = [], n
    for node, g in a.placement:
        if left <= 0:
            break
        out.append((node, min(g, left)))
        left -= min(g, left)
    return Allocation(a.gpu_type, tuple(out), a.batch_size)


class Quotas:
    """``user_of``/``max_gpus``: per job id; ``quota(user)``: most GPUs at once (None: no limit)."""

    def __init__(self, user_of: dict[str, int], max_gpus: dict[str, int], quota: Callable[[int], int | None]):
        self.user_of, self.max_gpus, self.quota = user_of, max_gpus, quota

    def _room(self, u: int) -> int:
        return self.quota(u) or UNLIMITED

    def used_by_user(self, jobs: dict[str, JobState], skip=()) -> dict[int, int]:
        used: dict[int, int] = {}
        for jid, js in jobs.items():
            if js.allocation is not None and jid not in skip:
                used[self.user_of[jid]] = used.get(self.user_of[jid], 0) + js.allocation.num_gpus
        return used

    def admit(self, pending: dict[str, JobState], running: dict[str, JobState]) -> dict[str, JobState]:
        """Per user, only the waiting jobs its remaining quota can hold."""
        asked = self.used_by_user(running)
        out = {}
        for j, js in pending.items():
            u = self.user_of[j]
            room = self._room(u) - asked.get(u, 0)
            if room >= 1:
                out[j] = js
                asked[u] = asked.get(u, 0) + min(js.job.num_gpus, room)
        return out

    def trim(self, d: Decision, jobs: dict[str, JobState], state: ClusterState) -> Decision:
        """The decision less grants over a quota or a max_gpus, and less what then no longer fits."""
        changed = {j for j in d.allocations if j in jobs}
        held = self.used_by_user(jobs, skip=changed)
        keep: dict[str, Allocation | None] = {}
        for jid in sorted(changed, key=lambda j: d.allocations[j] is not None):   # releases first
            a, u = d.allocations[jid], self.user_of[jid]
            if a is not None:
                room = min(self.max_gpus[jid], self._room(u) - held.get(u, 0))
                if a.num_gpus > room:
                    cur = jobs[jid].allocation
                    if cur is None and room >= 1:      # a new job: the same placement, trimmed
                        a = trim_to(a, room)
                    else:
                        if cur is not None:
                            held[u] = held.get(u, 0) + cur.num_gpus
                        continue
                held[u] = held.get(u, 0) + a.num_gpus
            keep[jid] = a
        return Decision(_fit(keep, jobs, state), [j for j in d.drop if j in jobs])


def _fit(keep: dict[str, Allocation | None], jobs: dict[str, JobState],
         state: ClusterState) -> dict[str, Allocation | None]:
    """Drop grants that no longer fit once some changes were held back (a held-back move keeps
    its old GPUs); a job that can keep neither is stopped."""
    st = state.copy()
    for jid in keep:
        if jobs[jid].allocation is not None:
            st.release(jobs[jid].allocation)
    out: dict[str, Allocation | None] = {}
    for jid, a in keep.items():
        for cand in (a, jobs[jid].allocation):
            if cand is None:
                out[jid] = None
                break
            try:
                st.allocate(cand)
            except ValueError:
                continue
            if cand == a:
                out[jid] = a
            break
        else:
            out[jid] = None
    return out
