"""What every fitted step-time form shares: input checks, the Pollux overlap of compute and
all-reduce, the robust loss and the bounded multi-start optimiser.

Accumulation (one meaning across gpuwise): ``grad_accum`` is the number of micro-steps per optimizer
step (1 = no accumulation), as in ``TrainingConfig.grad_accum``; global batch = replicas x local
batch x grad_accum. Pollux's own papers and profiles count the *extra* micro-steps instead; that
count appears only inside the formulas below, as ``grad_accum - 1``.
"""

from __future__ import annotations

import numpy as np

from gpuwise.errors import InputError

TIME_FLOOR_S = 1e-8          # seconds; keeps log() finite for terms the data drive to zero
GAMMA_BOUNDS = (1.0, 10.0)


def as_arrays(*values) -> tuple[np.ndarray, ...]:
    """Each argument as a float array (scalars stay 0-d): the inputs of every form's ``predict``."""
    return tuple(np.asarray(v, dtype=float) for v in values)


def overlapped(t_grad, t_net, gamma: float, grad_accum):
    """(step_time, sync_time) from compute and network time per micro-step, overlapped as Pollux does:
    T_optim = (T_grad^gamma + T_net^gamma)^(1/gamma), T_step = (grad_accum - 1) * T_grad + T_optim
    (every form: only the last micro-step's all-reduce overlaps its compute)."""
    if np.any(np.asarray(grad_accum) < 1):   # 0 = Pollux's "no extra step" would silently subtract one
        raise InputError("grad_accum", float(np.min(grad_accum)), "give micro-steps per optimizer step (>= 1; 1 = none)")
    # (a^g + b^g)^(1/g) computed as a * (1 + (b/a)^g)^(1/g): no overflow for gamma up to 10.
    ratio = np.where(t_grad > 0, t_net / np.maximum(t_grad, TIME_FLOOR_S), 0.0)
    t_optim = np.maximum(t_grad, TIME_FLOOR_S) * (1.0 + ratio ** gamma) ** (1.0 / gamma)
    step = (grad_accum - 1.0) * t_grad + t_optim
    sync = t_optim - t_grad
    if np.ndim(step) == 0:
        return float(step), float(sync)
    return step, sync


def check_values(name: str, arr: np.ndarray, positive: bool = True) -> None:
    if not np.all(np.isfinite(arr)):
        raise InputError(name, arr.tolist()[:5], "all values must be finite numbers")
    if positive and np.any(arr <= 0):
        raise InputError(name, arr[arr <= 0].tolist()[:5], "all values must be > 0")


NODE_NET_RATIO = 3.0   # prior: across-node / within-node sync time; median of full fits of the 6 bundled
                       # Pollux profiles is 3.3-4.4 (T4 nodes, 10 Gb/s-class network vs PCIe)
LOG_NODE_RATIO = float(np.log(NODE_NET_RATIO))
_ROBUST_SCALE = 0.05  # log-error scale (~5%) beyond which residuals count linearly, not squared


def robust_loss(err: np.ndarray) -> float:
    """Mean soft-L1 loss of log errors: quadratic below ~5%, linear above, so one odd placement
    (profiles scatter by +-10% between placements with the same node/replica counts) does not
    drag the whole fit."""
    z = (err / _ROBUST_SCALE) ** 2
    return float(np.mean(2.0 * (np.sqrt(1.0 + z) - 1.0))) * _ROBUST_SCALE ** 2


def as_points(num_nodes, num_replicas, local_bsz, step_time, grad_accum=None) -> tuple[np.ndarray, ...]:
    """The measured columns of a fit as flat float arrays (nodes, replicas, local batch, step time,
    micro-steps per optimizer step -- ones when not given); shared by every step-time fit."""
    step = np.asarray(step_time, dtype=float).ravel()
    accum = np.ones_like(step) if grad_accum is None else np.asarray(grad_accum, float).ravel()
    return (np.asarray(num_nodes, dtype=float).ravel(), np.asarray(num_replicas, dtype=float).ravel(),
            np.asarray(local_bsz, dtype=float).ravel(), step, accum)


def check_points(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, grad_accum=None):
    """``as_points`` plus validation (InputError naming the bad field) and the sync times clipped to
    [0, step); returns (nodes, replicas, local batch, step, grad_accum, sync or None)."""
    nodes, reps, bsz, step, accum = as_points(num_nodes, num_replicas, local_bsz, step_time, grad_accum)
    n = step.size
    if n < 2:
        raise InputError("points", n, "need at least 2 measured rows to fit the step-time model")
    if not (nodes.size == reps.size == bsz.size == n == accum.size):
        raise InputError("points", (nodes.size, reps.size, bsz.size, n), "all columns need the same length")
    check_values("step_time", step)
    check_values("local_bsz", bsz)
    check_values("num_replicas", reps)
    if not np.all(np.isfinite(accum)) or np.any(accum < 1):
        raise InputError("grad_accum", accum[~(accum >= 1)].tolist()[:5], "give micro-steps per optimizer step >= 1")
    if np.any(nodes > reps) or np.any(nodes < 1):
        raise InputError("num_nodes", nodes.tolist()[:5], "need 1 <= num_nodes <= num_replicas")
    sync = None
    if sync_time is not None:
        sync = np.asarray(sync_time, dtype=float).ravel()
        if sync.size != n:
            raise InputError("sync_time", sync.size, f"give one sync time per measured row ({n})")
        check_values("sync_time", sync, positive=False)
        sync = np.clip(sync, 0.0, step * 0.999)
    return nodes, reps, bsz, step, accum, sync


def distinct_points(*columns: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """(inverse, distinct columns): a fitted form is evaluated once per distinct row of ``columns``
    and scattered back with ``inverse`` (profiles repeat keys; 1,000+ rows stay cheap to fit)."""
    uniq, inverse = np.unique(np.column_stack(columns), axis=0, return_inverse=True)
    return inverse.ravel(), list(uniq.T)


def minimise_from(loss, starts: list[np.ndarray], bounds: list[tuple[float, float]]) -> np.ndarray:
    """Bounded L-BFGS-B from each start (clipped into ``bounds``); the parameters of the lowest loss.
    Several starts because the overlap exponent makes the loss non-convex."""
    from scipy.optimize import minimize

    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    best = None
    for x0 in starts:
        res = minimize(loss, np.clip(x0, lo, hi), method="L-BFGS-B", bounds=bounds)
        if best is None or res.fun < best.fun:
            best = res
    return best.x


