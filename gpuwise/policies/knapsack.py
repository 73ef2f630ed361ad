"""Exact allocation of one GPU type's capacity over jobs whose GPU count is optional.

Unlike `dp.py` (every job taken must get >= 1 GPU, jobs in order), here a job may get nothing
(value 0) and only some counts are allowed (a configuration set: `configurations`):

    P_j[k] = max(P_{j-1}[k], max over allowed g <= k of V_j(g) + P_{j-1}[k - g])

so P_J[K] is the best total value with at most K GPUs in use. O(J * C * K) for C allowed counts,
vectorised over k with numpy. `brute_force_optional` is the exhaustive reference for tests.
"""

from __future__ import annotations

import itertools

import numpy as np


def configurations(gpus_per_node: int, total: int) -> list[int]:
    """Allowed GPU counts on one type (Sia's set): powers of two below a node, then whole nodes.
    Powers of two that divide the node size pack onto nodes without fragmentation, and a job on
    several nodes holds them whole, so distributed jobs never share a node (no interference)."""
    out, n = [], 1
    while n < gpus_per_node and n <= total:
        out.append(n)
        n *= 2
    out += list(range(gpus_per_node, total + 1, gpus_per_node))
    return out


def knapsack_allocate(values: list[dict[int, float]], capacity: int) -> tuple[float, list[int]]:
    """Best total of V_j(g_j) with g_j in each job's allowed counts or 0 (value 0), sum <= capacity.

    ``values[j]``: {g: V_j(g)} for the counts job j may get (non-finite values are skipped).
    Returns (total, [g_j per job, 0 = none]); ties keep the earlier job's smaller count."""
    K = int(capacity)
    P = np.zeros(K + 1)
    choices = []
    for v in values:
        best, arg = P.copy(), np.zeros(K + 1, dtype=np.int64)
        for g, val in sorted(v.items()):
            if not (1 <= g <= K) or not np.isfinite(val):
                continue
            cand = np.full(K + 1, -np.inf)
            cand[g:] = P[: K + 1 - g] + val
            better = cand > best + 1e-12
            best = np.where(better, cand, best)
            arg = np.where(better, g, arg)
        P = best
        choices.append(arg)
    gs = [0] * len(values)
    k = int(np.argmax(P))
    total = float(P[k])
    for j in range(len(values) - 1, -1, -1):
        gs[j] = int(choices[j][k])
        k -= gs[j]
    return total, gs


def brute_force_optional(values: list[dict[int, float]], capacity: int) -> tuple[float, list[int]]:
    """Exhaustive reference: every combination of allowed counts (or 0) within capacity."""
    best, arg = -np.inf, []
    ranges = [[0] + [g for g, val in v.items() if 1 <= g <= capacity and np.isfinite(val)] for v in values]
    for gs in itertools.product(*ranges):
        if sum(gs) <= capacity:
            tot = sum(values[j][g] for j, g in enumerate(gs) if g)
            if tot > best + 1e-12:
                best, arg = tot, list(gs)
    return float(best), arg
