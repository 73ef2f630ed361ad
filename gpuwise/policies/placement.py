"""Placement: turning "n GPUs of type T" into GPUs per node.

- `best_fit` (Frenzy's HAS): a node whose free GPUs of the type match exactly; otherwise the node
  with the least free GPUs that still holds the request; otherwise greedy across nodes, largest
  free first. A request that fits on one node is therefore never split.
- `first_fit`: the first node (in cluster order) that holds the request, else GPUs gathered in
  node order -- the classic baseline.
- `whole_node_fit` (Pollux's interference avoidance): up to a node's size, one node (best fit);
  beyond it, whole free nodes only, so two distributed jobs never share a node's network.
On an unbounded cluster both use free GPUs of existing machines as above and, when those are
short, new machines (`ClusterState.fresh_placement`): a pay-per-use cloud never says no.
"""

from __future__ import annotations

from typing import Callable, Iterable

from gpuwise.policies.base import Allocation, ClusterState, PerfModel, SchedView
from gpuwise.policies.pools import allowed_types

Placement = tuple[tuple[int, int], ...]
PlaceFn = Callable[[ClusterState, str, int], "Placement | None"]


def best_fit(state: ClusterState, gpu: str, n: int) -> Placement | None:
    """Best-fit placement of ``n`` GPUs of type ``gpu`` on ``state`` (not modified); None if short."""
    nodes = [(state.free[i], i) for i in state.nodes_of(gpu) if state.free[i] > 0]
    if n < 1:
        return None
    if state.unbounded:
        return _on_demand(state, gpu, n, nodes)
    if sum(f for f, _ in nodes) < n:
        return None
    holders = [(f, i) for f, i in nodes if f >= n]
    if holders:  # exact fit if any, else least remaining: both are the minimum free >= n
        f, i = min(holders)
        return ((i, n),)
    out, _ = _gather(sorted(nodes, key=lambda x: (-x[0], x[1])), n)
    return tuple(sorted(out))


def whole_node_fit(state: ClusterState, gpu: str, n: int) -> Placement | None:
    """``n`` GPUs on one node (best fit) if a node's size holds them, else on ceil(n / node size)
    nodes with no other job, filled in node order; None when that is not possible now."""
    if n < 1 or state.unbounded:
        return best_fit(state, gpu, n) if n >= 1 else None
    nodes = state.nodes_of(gpu)
    if not nodes:
        return None
    gpn = max(state.cap[i] for i in nodes)
    if n <= gpn:
        holders = [(state.free[i], i) for i in nodes if state.free[i] >= n]
        return ((min(holders)[1], n),) if holders else None
    out, need = _gather([(state.cap[i], i) for i in nodes if state.free[i] == state.cap[i]], n)
    return None if need else tuple(out)


def first_fit(state: ClusterState, gpu: str, n: int) -> Placement | None:
    """First-fit placement (cluster order); None if the type has fewer than ``n`` free GPUs."""
    nodes = [i for i in state.nodes_of(gpu) if state.free[i] > 0]
    if n < 1:
        return None
    if state.unbounded:
        return _on_demand(state, gpu, n, [(state.free[i], i) for i in nodes])
    if sum(state.free[i] for i in nodes) < n:
        return None
    for i in nodes:
        if state.free[i] >= n:
            return ((i, n),)
    out, _ = _gather([(state.free[i], i) for i in nodes], n)
    return tuple(out)


def _gather(avail: Iterable[tuple[int, int]], n: int) -> tuple[list[tuple[int, int]], int]:
    """Take GPUs from ``(available, node)`` pairs in the given order until ``n`` are taken: the
    ``(node, GPUs)`` taken and how many are still missing (0 when the pairs held enough)."""
    out, need = [], n
    for f, i in avail:
        if need == 0:
            break
        if f > 0:
            take = min(f, need)
            out.append((i, take))
            need -= take
    return out, need


def _on_demand(state: ClusterState, gpu: str, n: int, nodes: list[tuple[int, int]]) -> Placement | None:
    """Unbounded cluster: the best-fitting machine that holds the request whole; else idle machines
    (reused so the pool stays as large as the peak need) topped up with new ones."""
    if gpu not in state.spec.gpu_types:
        return None
    holders = [(f, i) for f, i in nodes if f >= n]
    if holders:
        return ((min(holders)[1], n),)
    out, need = _gather([(f, i) for f, i in nodes if f == state.cap[i]], n)
    if need:
        out.extend(state.fresh_placement(gpu, need))
    return tuple(out)


def place_request(state: ClusterState, js, place: PlaceFn, n: int | None = None,
                  perf: PerfModel | None = None) -> Allocation | None:
    """Place ``n`` GPUs (default: the job's own request) at the job's batch on the first allowed GPU
    type (`pools.allowed_types`: the job's own, else cluster order, with ``perf`` only types the job
    runs on) that ``place`` can realise; allocate it on ``state`` (modified) and return it, or None
    when no type can."""
    n = js.job.num_gpus if n is None else n
    for gpu in allowed_types(js.job, state.spec.gpu_types, perf):
        pl = place(state, gpu, n)
        if pl is not None:
            alloc = Allocation(gpu, pl, js.job.batch_size)
            state.allocate(alloc)
            return alloc
    return None


PLACEMENTS: dict[str, PlaceFn] = {"best-fit": best_fit, "first-fit": first_fit, "whole-node": whole_node_fit}

Share = tuple[str, int, "int | None"]  # (gpu type, GPUs, global batch)


def place_shares(view: SchedView, shares: dict[str, Share], place: PlaceFn = best_fit
                 ) -> dict[str, Allocation | None]:
    """Allocations realising ``shares`` (jobs absent from it get none), as changes only.

    Running jobs whose GPU type and count are unchanged keep their nodes (no needless move);
    the others are placed largest first to limit fragmentation. A job that cannot be placed gets
    nothing this round (a running one keeps its old nodes if they are still free).
    """
    state = view.cluster.copy()
    out: dict[str, Allocation | None] = {}
    keep: dict[str, Allocation] = {}
    for name, js in view.running.items():
        cur = js.allocation
        sh = shares.get(name)
        if cur is not None and sh is not None and sh[0] == cur.gpu_type and sh[1] == cur.num_gpus:
            keep[name] = cur
            if sh[2] != cur.batch_size:
                out[name] = Allocation(cur.gpu_type, cur.placement, sh[2])
        elif cur is not None:
            state.release(cur)
            out[name] = None
    todo = sorted((n for n in shares if n not in keep), key=lambda n: -shares[n][1])
    for name in todo:
        gpu, n, batch = shares[name]
        pl = place(state, gpu, n)
        if pl is None:
            js = view.running.get(name)
            old = js.allocation if js is not None else None
            if old is not None and all(state.free[i] >= g for i, g in old.placement):
                state.allocate(old)
                out.pop(name, None)
            continue
        alloc = Allocation(gpu, pl, batch)
        state.allocate(alloc)
        js = view.running.get(name)
        if js is not None and js.allocation == alloc:
            out.pop(name, None)
        else:
            out[name] = alloc
    return out
