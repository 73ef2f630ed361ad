"""Extended step-time model: the Pollux form with a non-linear compute curve and a node-count term.

Fitted on all rows of the six bundled Pollux profiles, the 7-parameter form (``fits.pollux``) leaves a
4.7-6.1% median error on four of them: compute is not linear in the local batch over a 30-1000x range
(deepspeech2 grows faster than linearly, ImageNet/NCF slower at small batch) and the across-node
all-reduce does not scale like the within-node one when the job spans more nodes. Two terms fix the
form, each with a prior at the Pollux value so that <= 10 points still give a usable fit:

    T_grad(b)   = alpha_c + beta_c * b^delta                 delta in [0.5, 2]   (Pollux: delta = 1)
    T_sync(N,R) = 0                                          if R == 1
                = alpha_r + beta_r * max(R - 2, 0)           if one node
                = (alpha_n + beta_n * max(R - 2, 0)) * (N/2)^eta   if N > 1 nodes (Pollux: eta = 0)
    T_optim     = (T_grad^gamma + T_sync^gamma)^(1/gamma)
    T_step      = (grad_accum - 1) * T_grad + T_optim

The fit starts from the Pollux fit of the same points (so it is never worse in-sample), uses the same
soft-L1 loss on log step time (and log compute time when sync is measured) and adds priors
delta ~ 1 and eta ~ 0, strong while the data cannot identify them (fewer than three local batch sizes;
fewer than two multi-node counts), weak otherwise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gpuwise.estimate.fits.common import (GAMMA_BOUNDS, LOG_NODE_RATIO, TIME_FLOOR_S, as_arrays, check_points,
                                          distinct_points, minimise_from, overlapped, robust_loss)
from gpuwise.estimate.fits.pollux import PolluxParams, fit_pollux

NAME = "extended"
ASSUMPTION = ("extended step-time form (Pollux terms + compute exponent delta, across-node (nodes/2)^eta, "
              "2-node and one-GPU-per-node factors)")

DELTA_BOUNDS = (0.5, 2.0)   # compute exponent: sub- to super-linear in the local batch
ETA_BOUNDS = (-2.0, 2.0)    # node-count exponent of the across-node all-reduce
FACTOR_BOUNDS = (-2.0, 2.0)  # log-factors for 2-node and one-GPU-per-node placements


@dataclass(frozen=True)
class ExtendedParams:
    """Parameters of the extended form (seconds; see the module docstring)."""

    alpha_c: float   # fixed compute time per micro-step (s)
    beta_c: float    # compute coefficient: beta_c * b^delta seconds for local batch b
    delta: float     # compute exponent in the local batch (1 = Pollux's linear compute)
    alpha_n: float   # across-node all-reduce at 2 replicas on 2 nodes (s)
    beta_n: float    # extra across-node all-reduce per replica beyond 2 (s)
    alpha_r: float   # within-node all-reduce at 2 replicas (s)
    beta_r: float    # extra within-node all-reduce per replica beyond 2 (s)
    eta: float       # across-node time scales as (nodes/2)^eta (0 = Pollux)
    gamma: float     # compute/communication overlap exponent in [1, 10]
    two_node: float = 0.0      # log-factor of the across-node time on exactly 2 nodes (0 = none)
    one_per_node: float = 0.0  # log-factor of the across-node time with one GPU per node (0 = none)

    form = "extended"

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _times(ac, bc, delta, an, bn, ar, br, eta, tau2, k1, nodes, reps, bsz):
    t_grad = ac + bc * np.power(bsz, delta)
    extra = np.maximum(reps - 2.0, 0.0)
    across = (an + bn * extra) * np.power(np.maximum(nodes, 2.0) / 2.0, eta) * np.exp(
        tau2 * (nodes == 2) + k1 * (reps == nodes))
    t_net = np.where(reps > 1, np.where(nodes > 1, across, ar + br * extra), 0.0)
    return t_grad, t_net


def predict_extended(params: ExtendedParams, num_nodes, num_replicas, local_bsz, grad_accum=1):
    """(step_time, sync_time) in seconds, vectorised like ``fits.predict``."""
    p = params
    nodes, reps, bsz, accum = as_arrays(num_nodes, num_replicas, local_bsz, grad_accum)
    t_grad, t_net = _times(p.alpha_c, p.beta_c, p.delta, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r, p.eta,
                           p.two_node, p.one_per_node, nodes, reps, bsz)
    t_grad = np.maximum(t_grad, TIME_FLOOR_S)
    return overlapped(t_grad, t_net, p.gamma, accum)


def from_pollux(p: PolluxParams) -> ExtendedParams:
    """The extended form with the Pollux values of delta (1) and eta (0): same predictions."""
    return ExtendedParams(p.alpha_c, p.beta_c, 1.0, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r, 0.0, p.gamma, 0.0, 0.0)


def fit_extended(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, grad_accum=None,
                 init: ExtendedParams | None = None, prior_weight: float = 0.02) -> ExtendedParams:
    """Fit ExtendedParams (same inputs and validation as ``fit_pollux``; >= 2 points).

    ``init`` warm-starts the optimiser; without it the Pollux fit of the same points is the start.
    ``prior_weight`` scales the priors (Pollux ones plus delta ~ 1, eta ~ 0)."""
    base = fit_pollux(num_nodes, num_replicas, local_bsz, step_time, sync_time, grad_accum,
                      prior_weight=prior_weight)   # validates the inputs too
    nodes, reps, bsz, step, accum, sync = check_points(num_nodes, num_replicas, local_bsz, step_time, sync_time,
                                                       grad_accum)
    n = step.size
    comp = None if sync is None else (step - sync) / accum
    b_ref = float(np.exp(np.mean(np.log(bsz))))   # compute is parametrised at the data's typical batch

    def pack(p: ExtendedParams) -> np.ndarray:
        v = [max(x, TIME_FLOOR_S) for x in (p.alpha_c, p.beta_c * b_ref ** p.delta, p.alpha_n, p.beta_n, p.alpha_r,
                                       p.beta_r)]
        return np.array([*np.log(v), p.delta, p.eta, p.gamma, p.two_node, p.one_per_node])

    def unpack(t: np.ndarray) -> ExtendedParams:
        ac, bc_ref, an, bn, ar, br = np.exp(t[:6])
        delta = float(t[6])
        return ExtendedParams(float(ac), float(bc_ref / b_ref ** delta), delta, float(an), float(bn), float(ar),
                              float(br), float(t[7]), float(t[8]), float(t[9]), float(t[10]))

    inverse, (u_nodes, u_reps, u_bsz, u_accum) = distinct_points(nodes, reps, bsz, accum)
    u_rel = u_bsz / b_ref
    log_step = np.log(step)
    log_comp = None if comp is None else np.log(np.maximum(comp, TIME_FLOOR_S))
    w_prior = prior_weight * 10.0 / (n + 10.0)
    seen_delta = np.unique(bsz).size >= 3
    seen_eta = np.unique(nodes[nodes > 1]).size >= 2
    seen_r = bool(np.any((reps > 1) & (nodes == 1)))
    seen_n = bool(np.any(nodes > 1))
    seen_r_slope = bool(np.any((reps > 2) & (nodes == 1)))
    seen_n_slope = bool(np.any((reps > 2) & (nodes > 1)))
    extra = np.maximum(u_reps - 2.0, 0.0)
    node_log = np.log(np.maximum(u_nodes, 2.0) / 2.0)
    multi, multi_node = u_reps > 1, u_nodes > 1
    two, one_per = (u_nodes == 2).astype(float), ((u_reps == u_nodes) & multi_node).astype(float)
    seen_two = bool(np.any(nodes == 2)) and bool(np.any(nodes > 2))
    seen_k1 = bool(np.any((nodes > 1) & (reps == nodes))) and bool(np.any((nodes > 1) & (reps > nodes)))

    def loss(t: np.ndarray) -> float:
        ac, bc, an, bn, ar, br = np.exp(t[:6])
        delta, eta, g = t[6], t[7], t[8]
        t_grad = ac + bc * u_rel ** delta
        across = (an + bn * extra) * np.exp(eta * node_log + t[9] * two + t[10] * one_per)
        t_net = np.where(multi, np.where(multi_node, across, ar + br * extra), 0.0)
        pred = (u_accum - 1.0) * t_grad + t_grad * (1.0 + (t_net / t_grad) ** g) ** (1.0 / g)
        total = robust_loss(np.log(pred)[inverse] - log_step)
        if log_comp is not None:
            total += 0.25 * robust_loss(np.log(t_grad)[inverse] - log_comp)
        tie = 0.1 if (seen_n and seen_r) else 10.0
        total += w_prior * tie * (t[2] - t[4] - LOG_NODE_RATIO) ** 2
        for lb, la, seen in ((t[5], t[4], seen_r_slope), (t[3], t[2], seen_n_slope)):
            total += w_prior * (0.1 if seen else 1.0) * (lb - (la + np.log(0.05))) ** 2
        total += w_prior * 0.1 * (g - 1.5) ** 2
        total += w_prior * (1.0 if seen_delta else 100.0) * (delta - 1.0) ** 2
        total += w_prior * (1.0 if seen_eta else 100.0) * eta ** 2
        total += w_prior * (1.0 if seen_two else 100.0) * t[9] ** 2
        total += w_prior * (1.0 if seen_k1 else 100.0) * t[10] ** 2
        return total

    bounds = [(-25.0, 5.0)] * 6 + [DELTA_BOUNDS, ETA_BOUNDS, GAMMA_BOUNDS, FACTOR_BOUNDS, FACTOR_BOUNDS]
    starts = [pack(init)] if init is not None else []
    starts.append(pack(from_pollux(base)))
    return unpack(minimise_from(loss, starts, bounds))
