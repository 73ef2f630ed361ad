"""The elastic-scaling DP (Saxena et al., MASCOTS'20; notes C.4), vectorised with numpy.

P[j][k] = max over 1 <= g <= min(k, G_j) of V_j(g) + P[j-1][k-g], with P[0][k] = 0 for every
k, so P[j][k] is the best total value of jobs 1..j using *at most* k GPUs (idle GPUs allowed).
Jobs are taken in order (running jobs first, then the queue in FIFO order). A job that cannot get
its minimum next to the jobs already taken is either skipped, the later ones still considered (``skip``:
the paper's per-job admit-or-drop rule, claims 1/5/8), or ends the list (strict FIFO: the longest
feasible prefix, the third-party code's queue trimming). Cost O(J * K * G_max) time and
O(J * K) memory; G_j is cut at the first g where V_j peaks (more GPUs never add value).
"""

from __future__ import annotations

import numpy as np


def useful_cap(v: np.ndarray) -> int:
    """Largest g worth giving: the first g where V peaks (0 if V is nowhere finite)."""
    if not np.isfinite(v).any():
        return 0
    return int(np.argmax(np.where(np.isfinite(v), v, -np.inf)))


def dp_allocate(values: list[np.ndarray], capacity: int,
                skip: bool = False) -> tuple[float, list[int], list[int]]:
    """Best GPUs per job for the jobs of ``values`` taken in order.

    values[j][g] is job j's value with g GPUs (index 0 unused / -inf); returns
    (total value, [g_j per included job], [indices j of the included jobs, ascending]).
    ``skip=False`` stops at the first job that cannot be fed (a prefix); ``skip=True`` leaves that
    job out and goes on with the next ones.
    """
    K = int(capacity)
    P = np.zeros(K + 1)
    ks = np.arange(K + 1)
    choices: list[np.ndarray] = []
    included: list[int] = []
    for j, v in enumerate(values):
        G = min(useful_cap(v), K)
        if G < 1:
            if skip:
                continue
            break
        # window k holds P[k-G .. k-1] (-inf where k-g < 0): column i is g = G - i
        padded = np.concatenate([np.full(G, -np.inf), P])
        windows = np.lib.stride_tricks.sliding_window_view(padded, G)[: K + 1]
        cand = windows + np.asarray(v[G:0:-1], float)[None, :]
        arg = cand.argmax(axis=1)
        newP = cand[ks, arg]
        if not np.isfinite(newP[K]):  # this job cannot get its minimum next to the ones taken
            if skip:
                continue
            break
        P = newP
        choices.append((G - arg).astype(np.int32))
        included.append(j)
    n = len(choices)
    gs = [0] * n
    k = K
    for j in range(n - 1, -1, -1):
        gs[j] = int(choices[j][k])
        k -= gs[j]
    return (float(P[K]) if n else 0.0), gs, included


def brute_force(values: list[np.ndarray], capacity: int) -> tuple[float, list[int]]:
    """Exhaustive reference for tests: best sum of V_j(g_j) with every g_j >= 1, sum <= capacity."""
    import itertools

    best, arg = -np.inf, []
    ranges = [range(1, min(len(v) - 1, capacity) + 1) for v in values]
    for gs in itertools.product(*ranges):
        if sum(gs) <= capacity:
            tot = sum(float(v[g]) for v, g in zip(values, gs))
            if tot > best:
                best, arg = tot, list(gs)
    return best, arg
