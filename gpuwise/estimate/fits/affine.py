"""Scavenger's parallel-performance model (Tyagi & Sharma, CCGrid'23, eq. 3-5, 8-10).

    tau(K, B) = c0 + c1 * (B / K) + s0 + s1 * K      seconds per iteration, K workers, global batch B
    n_i       = e * D / B                             iterations (e epochs of a D-sample dataset)
    T         = n_i * tau                             time to target (eq. 3)
    C         = T * K * p                             cost, p = price per worker-hour (eq. 5)

The affine form is the "linear models" the paper fits (papers.md B.2 note: the "proportional to" in
eq. 9-10 is loose); it is a simpler alternative to the Pollux form when only (K, B, tau) are known.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwise.errors import InputError
from gpuwise.estimate.fits.common import check_points, check_values

NAME = "affine"
ASSUMPTION = "Scavenger affine step-time form tau(K, B) = c0 + c1*B/K + s0 + s1*K (no node term, no overlap)"


@dataclass(frozen=True)
class AffineStepTime:
    """tau(K, B) = c0 + c1*B/K + s0 + s1*K; usable as a JobModel step-time source (K = replicas)."""

    c0: float   # fixed compute time per iteration (s)
    c1: float   # compute time per sample of the per-worker batch (s/sample)
    s0: float   # fixed synchronisation time (s)
    s1: float   # synchronisation time per worker (s/worker; parameter-server traffic grows with K)

    def tau(self, workers, global_batch):
        k = np.asarray(workers, float)
        return self.c0 + self.c1 * np.asarray(global_batch, float) / k + self.s0 + self.s1 * k

    def step_time(self, num_nodes, num_replicas, local_bsz, grad_accum=1):
        return predict_affine(self, num_nodes, num_replicas, local_bsz, grad_accum)[0]

    def describe(self) -> str:
        return (f"step time: Scavenger affine tau(K,B) = {self.c0 + self.s0:.4g} + {self.c1:.4g}*B/K + "
                f"{self.s1:.4g}*K s")


def fit_affine(workers, global_batch, tau, compute_time=None) -> AffineStepTime:
    """Least-squares fit of tau(K, B). With measured ``compute_time`` the compute (c0, c1) and sync
    (s0, s1) parts are fitted separately, as Scavenger does from its per-iteration logs."""
    k = np.asarray(workers, float)
    b = np.asarray(global_batch, float)
    t = np.asarray(tau, float)
    if t.size < 3:
        raise InputError("points", t.size, "need >= 3 measured (K, B, tau) points")
    c = None if compute_time is None else np.asarray(compute_time, float)
    if not (k.size == b.size == t.size == (t.size if c is None else c.size)):
        raise InputError("points", (k.size, b.size, t.size), "workers, global_batch, tau (and compute_time) "
                         "need the same length")
    check_values("workers", k)
    check_values("global_batch", b)
    check_values("tau", t)
    if c is not None:
        (c0, c1), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(k), b / k]), c, rcond=None)
        (s0, s1), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(k), k]), t - c, rcond=None)
        return AffineStepTime(float(c0), float(c1), float(s0), float(s1))
    X = np.column_stack([np.ones_like(k), b / k, k])
    (c, c1, s1), *_ = np.linalg.lstsq(X, t, rcond=None)
    return AffineStepTime(float(c), float(c1), 0.0, float(s1))


def scavenger_time_cost(epochs: float, dataset_size: float, global_batch: float, tau: float, workers: int,
                        price_per_worker_hour: float) -> tuple[float, float]:
    """(hours, dollars) by Scavenger eq. 3-5: T = (e*D/B)*tau, C = T*K*p."""
    from gpuwise.estimate.cost import training_cost

    hours = epochs * dataset_size / global_batch * tau / 3600.0
    return hours, training_cost(hours, price_per_worker_hour, workers)


def predict_affine(params: AffineStepTime, num_nodes, num_replicas, local_bsz, grad_accum=1):
    """(step_time, sync_time): grad_accum micro-steps of compute, then the sync (never overlapped)."""
    k = np.asarray(num_replicas, float)
    comp = params.c0 + params.c1 * np.asarray(local_bsz, float)
    sync = params.s0 + params.s1 * k
    step = np.asarray(grad_accum, float) * comp + sync
    if np.ndim(step) == 0:
        return float(step), float(sync)
    return step, np.broadcast_to(sync, np.shape(step))


def fit_affine_points(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, grad_accum=None, **_):
    """``fit_affine`` from the registry's common columns (one micro-step per optimizer step)."""
    nodes, reps, bsz, step, accum, sync = check_points(num_nodes, num_replicas, local_bsz, step_time, sync_time,
                                                       grad_accum)
    if np.any(accum != 1):
        raise InputError("grad_accum", accum[accum != 1].tolist()[:5], "the affine form is fitted without accumulation")
    return fit_affine(reps, reps * bsz, step, None if sync is None else step - sync)
