"""Pollux's 7-parameter step-time model of a data-parallel job, and its fit to measurements.

Model (Qiao et al., OSDI'21, sec. 3.2; the same form as adaptdl ``goodput.py``), all times in seconds:

    T_grad(b)   = alpha_c + beta_c * b                       compute of one micro-step, b = local batch
    T_sync(N,R) = 0                                          if R == 1 replica
                = alpha_r + beta_r * max(R - 2, 0)           if all R replicas are on one node
                = alpha_n + beta_n * max(R - 2, 0)           if they span N > 1 nodes
    T_optim     = (T_grad^gamma + T_sync^gamma)^(1/gamma)    gamma in [1, 10]: 1 = no overlap, large =
                                                             perfect overlap of compute and all-reduce
    T_step      = (grad_accum - 1) * T_grad + T_optim        grad_accum micro-steps per update

Naming follows Pollux: ``_n`` = network across nodes, ``_r`` = replicas within one node. The
predicted ``sync_time`` is the *exposed* synchronisation T_optim - T_grad, which is what the Pollux
profiles record as ``sync_time`` (it shrinks as the local batch grows and hides more of the all-reduce).

The fit minimises squared log errors of step time (and of compute time = step - sync when sync is
measured) with weak priors so that 2-5 points already give a usable model:
- the across-node terms are pulled towards NODE_NET_RATIO x the within-node terms (and vice versa)
  when a kind of placement has not been observed, so a job seen only on one node still predicts a
  cross-node penalty;
- the retrogression slopes beta_r, beta_n are pulled towards a small fraction of the intercepts;
- gamma is pulled towards 1.5 (partial overlap) and bounded to [1, 10].
Prior weights are small next to the data term, so with enough points the data dominate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gpuwise.estimate.fits.common import (GAMMA_BOUNDS, LOG_NODE_RATIO, TIME_FLOOR_S, as_arrays, check_points,
                                          distinct_points, overlapped, robust_loss)

NAME = "pollux"
ASSUMPTION = ("Pollux 7-parameter step-time form (compute alpha_c + beta_c*b; all-reduce alpha + beta*(replicas-2), "
              "_n across nodes and _r within one node; overlap exponent gamma)")

_NAMES = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")




@dataclass(frozen=True)
class PolluxParams:
    """The seven Pollux parameters (seconds, seconds per sample, seconds per extra replica)."""

    alpha_c: float   # fixed compute time per micro-step (s)
    beta_c: float    # compute time per sample of the local batch (s/sample)
    alpha_n: float   # all-reduce time across nodes at 2 replicas (s)
    beta_n: float    # extra across-node all-reduce time per replica beyond 2 (s)
    alpha_r: float   # all-reduce time within one node at 2 replicas (s)
    beta_r: float    # extra within-node all-reduce time per replica beyond 2 (s)
    gamma: float     # compute/communication overlap exponent in [1, 10]

    form = "pollux"

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def predict_pollux(params: PolluxParams, num_nodes, num_replicas, local_bsz, grad_accum=1):
    """(step_time, sync_time) in seconds; vectorised over numpy-broadcastable arguments; the global
    batch is num_replicas * local_bsz * grad_accum."""
    nodes, reps, bsz, accum = as_arrays(num_nodes, num_replicas, local_bsz, grad_accum)
    p = params
    t_grad = p.alpha_c + p.beta_c * bsz
    extra = np.maximum(reps - 2.0, 0.0)
    t_net = np.where(nodes > 1, p.alpha_n + p.beta_n * extra, p.alpha_r + p.beta_r * extra)
    t_net = np.where(reps > 1, t_net, 0.0)
    return overlapped(t_grad, t_net, p.gamma, accum)


def _unpack(theta: np.ndarray) -> PolluxParams:
    v = np.exp(theta[:6])
    return PolluxParams(*v.tolist(), gamma=float(theta[6]))


def _pack(p: PolluxParams) -> np.ndarray:
    v = [max(getattr(p, n), TIME_FLOOR_S) for n in _NAMES[:6]]
    return np.array([*np.log(v), p.gamma])


def default_init(local_bsz: np.ndarray, compute_time: np.ndarray, step_time: np.ndarray,
                 num_replicas: np.ndarray, num_nodes: np.ndarray | None = None) -> PolluxParams:
    """Starting point from the data: a line through the compute times (single-replica points when
    there are two batch sizes of them), network = median excess of multi-replica steps over it."""
    b = np.asarray(local_bsz, float)
    c = np.asarray(compute_time, float)
    st = np.asarray(step_time, float)
    reps = np.asarray(num_replicas)
    single = reps == 1
    use = single if np.unique(b[single]).size >= 2 else np.ones_like(single)
    if np.ptp(b[use]) > 0:
        slope, icpt = np.polyfit(b[use], c[use], 1)
    else:
        slope, icpt = 0.5 * c.mean() / max(b.mean(), 1.0), 0.5 * c.mean()
    slope = max(slope, 1e-3 * c.mean() / max(b.mean(), 1.0))
    icpt = max(icpt, 1e-3 * c.mean())
    comp = icpt + slope * b
    multi = reps > 1
    excess = st - comp
    floor = 0.1 * float(comp.mean())
    nodes = np.ones_like(reps) if num_nodes is None else np.asarray(num_nodes)
    net_r = float(np.median(excess[multi & (nodes == 1)])) if np.any(multi & (nodes == 1)) else None
    net_n = float(np.median(excess[multi & (nodes > 1)])) if np.any(multi & (nodes > 1)) else None
    net_r = max(net_r if net_r is not None else (net_n or floor), floor)
    net_n = max(net_n if net_n is not None else net_r, floor)
    return PolluxParams(icpt, slope, net_n, 0.05 * net_n, net_r, 0.05 * net_r, 1.5)


def fit_pollux(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, grad_accum=None,
               init: PolluxParams | None = None, prior_weight: float = 0.02) -> PolluxParams:
    """Fit PolluxParams to measured points (arrays of equal length, >= 2 points).

    ``sync_time`` (optional) is the measured exposed synchronisation per step; with it the compute
    part step - sync is fitted too, which pins alpha_c/beta_c from very few points. ``init`` warm-starts
    the optimiser (incremental refits as new points arrive; see ``OnlinePolluxFit``).
    ``prior_weight`` scales the regularisation terms described in the module docstring.
    """
    from scipy.optimize import minimize

    nodes, reps, bsz, step, accum, sync = check_points(num_nodes, num_replicas, local_bsz, step_time, sync_time,
                                                       grad_accum)
    n = step.size
    # compute-time target (per micro-step) where it can be read off the data
    comp = None if sync is None else (step - sync) / accum
    x0 = _pack(init) if init is not None else _pack(default_init(
        bsz, comp if comp is not None else step / accum, step / accum, reps, nodes))

    seen_r = bool(np.any((reps > 1) & (nodes == 1)))
    seen_n = bool(np.any(nodes > 1))
    seen_r_slope = bool(np.any((reps > 2) & (nodes == 1)))
    seen_n_slope = bool(np.any((reps > 2) & (nodes > 1)))
    log_step = np.log(step)
    log_comp = None if comp is None else np.log(np.maximum(comp, TIME_FLOOR_S))
    w_prior = prior_weight * 10.0 / (n + 10.0)  # fades as points accumulate

    # the prediction depends only on (across nodes?, replicas, local batch, accum): evaluate it once per
    # distinct key and scatter back, which makes large profiles (1,000+ rows) cheap to fit
    inverse, (u_multi_node, u_reps, u_bsz, u_accum) = distinct_points(nodes > 1, reps, bsz, accum)
    u_multi_node = u_multi_node > 0
    u_multi = u_reps > 1
    u_extra = np.maximum(u_reps - 2.0, 0.0)

    def loss(theta: np.ndarray) -> float:
        ac, bc, an, bn, ar, br = np.exp(theta[:6])
        g = theta[6]
        t_grad = ac + bc * u_bsz
        t_net = np.where(u_multi, np.where(u_multi_node, an + bn * u_extra, ar + br * u_extra), 0.0)
        t_optim = t_grad * (1.0 + (t_net / t_grad) ** g) ** (1.0 / g)
        pred = (u_accum - 1.0) * t_grad + t_optim
        total = robust_loss(np.log(pred)[inverse] - log_step)
        if log_comp is not None:
            total += 0.25 * robust_loss(np.log(t_grad)[inverse] - log_comp)
        la_n, lb_n, la_r, lb_r = theta[2], theta[3], theta[4], theta[5]
        # across-node all-reduce ~NODE_NET_RATIO x the within-node one (strong prior while either is unseen)
        tie = 0.1 if (seen_n and seen_r) else 10.0
        total += w_prior * tie * (la_n - la_r - LOG_NODE_RATIO) ** 2
        # slopes: small next to the intercepts unless the data say otherwise
        for lb, la, seen in ((lb_r, la_r, seen_r_slope), (lb_n, la_n, seen_n_slope)):
            total += w_prior * (0.1 if seen else 1.0) * (lb - (la + np.log(0.05))) ** 2
        total += w_prior * 0.1 * (theta[6] - 1.5) ** 2
        return total

    bounds = [(-25.0, 5.0)] * 6 + [GAMMA_BOUNDS]
    x0 = np.clip(x0, [b[0] for b in bounds], [b[1] for b in bounds])
    best = minimize(loss, x0, method="L-BFGS-B", bounds=bounds)
    # gamma and tiny network terms make the surface non-convex: restart from other overlap exponents
    # and network scales, keep the best
    for g0, net_scale in ((1.0, 1.0), (4.0, 1.0), (1.5, 3.0), (1.5, 0.3)):
        alt = x0.copy()
        alt[6] = g0
        alt[2:6] += np.log(net_scale)
        res = minimize(loss, np.clip(alt, [b[0] for b in bounds], [b[1] for b in bounds]), method="L-BFGS-B",
                       bounds=bounds)
        if res.fun < best.fun - 1e-12:
            best = res
    return _unpack(best.x)


