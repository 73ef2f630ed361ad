"""Pollux's 7-parameter step-time model of a data-parallel job, and its fit to measurements.

Model (Qiao et al., OSDI'21, sec. 3.2; the same form as adaptdl ``goodput.py``), all times in seconds:

    T_grad(b)   = alpha_c + beta_c * b                       compute of one micro-step, b = local batch
    T_sync(N,R) = 0                                          if R == 1 replica
                = alpha_r + beta_r * max(R - 2, 0)           if all R replicas are on one node
                = alpha_n + beta_n * max(R - 2, 0)           if they span N > 1 nodes
    T_optim     = (T_grad^gamma + T_sync^gamma)^(1/gamma)    gamma in [1, 10]: 1 = no overlap, large =
                                                             perfect overlap of compute and all-reduce
    T_step      = accum_steps * T_grad + T_optim             accum_steps extra micro-steps per update

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

from gpuwise.errors import InputError

_NAMES = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
_FLOOR = 1e-8          # seconds; keeps log() finite for terms the data drive to zero
GAMMA_BOUNDS = (1.0, 10.0)


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


FORMS = ("pollux", "extended", "bottleneck")   # step-time model forms; the other two live in extended_fit.py
                                               # and bottleneck_fit.py
# what each form assumes, for the output of anything that fits one (one line each)
FORM_ASSUMPTIONS = {
    "pollux": "Pollux 7-parameter step-time form (compute alpha_c + beta_c*b; all-reduce alpha + beta*(replicas-2), "
              "_n across nodes and _r within one node; overlap exponent gamma)",
    "extended": "extended step-time form (Pollux terms + compute exponent delta, across-node (nodes/2)^eta, "
                "2-node and one-GPU-per-node factors)",
    "bottleneck": "bottleneck step-time form (compute alpha_c + beta_c*b^delta; across-node all-reduce "
                  "alpha_n*(nodes/2)^eta*(GPUs per node)^kappa with its own level and exponent on 2 nodes; "
                  "within-node as Pollux; fits best within the profiled node counts, extrapolates worse)",
}


def as_arrays(*values) -> tuple[np.ndarray, ...]:
    """Each argument as a float array (scalars stay 0-d): the inputs of every form's ``predict``."""
    return tuple(np.asarray(v, dtype=float) for v in values)


def predict(params, num_nodes, num_replicas, local_bsz, accum_steps=0):
    """(step_time, sync_time) in seconds; vectorised over numpy-broadcastable arguments.

    ``accum_steps`` counts the *extra* micro-steps per optimizer step (0 = no accumulation), so the
    global batch is num_replicas * local_bsz * (accum_steps + 1). ``params`` is a PolluxParams or an
    ``extended_fit.ExtendedParams`` or a ``bottleneck_fit.BottleneckParams`` (dispatched on its ``form``).
    """
    form = getattr(params, "form", "pollux")
    if form == "extended":
        from gpuwise.estimate.extended_fit import predict_extended

        return predict_extended(params, num_nodes, num_replicas, local_bsz, accum_steps)
    if form == "bottleneck":
        from gpuwise.estimate.bottleneck_fit import predict_bottleneck

        return predict_bottleneck(params, num_nodes, num_replicas, local_bsz, accum_steps)
    nodes, reps, bsz, accum = as_arrays(num_nodes, num_replicas, local_bsz, accum_steps)
    p = params
    t_grad = p.alpha_c + p.beta_c * bsz
    extra = np.maximum(reps - 2.0, 0.0)
    t_net = np.where(nodes > 1, p.alpha_n + p.beta_n * extra, p.alpha_r + p.beta_r * extra)
    t_net = np.where(reps > 1, t_net, 0.0)
    return overlapped(t_grad, t_net, p.gamma, accum)


def overlapped(t_grad, t_net, gamma: float, accum):
    """(step_time, sync_time) from compute and network time per micro-step, overlapped as Pollux does:
    T_optim = (T_grad^gamma + T_net^gamma)^(1/gamma), T_step = accum * T_grad + T_optim (every form)."""
    # (a^g + b^g)^(1/g) computed as a * (1 + (b/a)^g)^(1/g): no overflow for gamma up to 10.
    ratio = np.where(t_grad > 0, t_net / np.maximum(t_grad, _FLOOR), 0.0)
    t_optim = np.maximum(t_grad, _FLOOR) * (1.0 + ratio ** gamma) ** (1.0 / gamma)
    step = accum * t_grad + t_optim
    sync = t_optim - t_grad
    if np.ndim(step) == 0:
        return float(step), float(sync)
    return step, sync


def _check(name: str, arr: np.ndarray, positive: bool = True) -> None:
    if not np.all(np.isfinite(arr)):
        raise InputError(name, arr.tolist()[:5], "all values must be finite numbers")
    if positive and np.any(arr <= 0):
        raise InputError(name, arr[arr <= 0].tolist()[:5], "all values must be > 0")


NODE_NET_RATIO = 3.0   # prior: across-node / within-node sync time; median of full fits of the 6 bundled
                       # Pollux profiles is 3.3-4.4 (T4 nodes, 10 Gb/s-class network vs PCIe)
_LOG_NODE_RATIO = float(np.log(NODE_NET_RATIO))
_ROBUST_SCALE = 0.05  # log-error scale (~5%) beyond which residuals count linearly, not squared


def _robust(err: np.ndarray) -> float:
    """Mean soft-L1 loss of log errors: quadratic below ~5%, linear above, so one odd placement
    (profiles scatter by +-10% between placements with the same node/replica counts) does not
    drag the whole fit."""
    z = (err / _ROBUST_SCALE) ** 2
    return float(np.mean(2.0 * (np.sqrt(1.0 + z) - 1.0))) * _ROBUST_SCALE ** 2


def _unpack(theta: np.ndarray) -> PolluxParams:
    v = np.exp(theta[:6])
    return PolluxParams(*v.tolist(), gamma=float(theta[6]))


def _pack(p: PolluxParams) -> np.ndarray:
    v = [max(getattr(p, n), _FLOOR) for n in _NAMES[:6]]
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


def as_points(num_nodes, num_replicas, local_bsz, step_time, accum_steps=None) -> tuple[np.ndarray, ...]:
    """The measured columns of a fit as flat float arrays (nodes, replicas, local batch, step time,
    accumulation steps -- zeros when not given); shared by every step-time fit."""
    step = np.asarray(step_time, dtype=float).ravel()
    accum = np.zeros_like(step) if accum_steps is None else np.asarray(accum_steps, float).ravel()
    return (np.asarray(num_nodes, dtype=float).ravel(), np.asarray(num_replicas, dtype=float).ravel(),
            np.asarray(local_bsz, dtype=float).ravel(), step, accum)


def check_points(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, accum_steps=None):
    """``as_points`` plus validation (InputError naming the bad field) and the sync times clipped to
    [0, step); returns (nodes, replicas, local batch, step, accum, sync or None)."""
    nodes, reps, bsz, step, accum = as_points(num_nodes, num_replicas, local_bsz, step_time, accum_steps)
    n = step.size
    if n < 2:
        raise InputError("points", n, "need at least 2 measured rows to fit the step-time model")
    if not (nodes.size == reps.size == bsz.size == n == accum.size):
        raise InputError("points", (nodes.size, reps.size, bsz.size, n), "all columns need the same length")
    _check("step_time", step)
    _check("local_bsz", bsz)
    _check("num_replicas", reps)
    if np.any(nodes > reps) or np.any(nodes < 1):
        raise InputError("num_nodes", nodes.tolist()[:5], "need 1 <= num_nodes <= num_replicas")
    sync = None
    if sync_time is not None:
        sync = np.asarray(sync_time, dtype=float).ravel()
        if sync.size != n:
            raise InputError("sync_time", sync.size, f"give one sync time per measured row ({n})")
        _check("sync_time", sync, positive=False)
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


def fit_pollux(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, accum_steps=None,
               init: PolluxParams | None = None, prior_weight: float = 0.02) -> PolluxParams:
    """Fit PolluxParams to measured points (arrays of equal length, >= 2 points).

    ``sync_time`` (optional) is the measured exposed synchronisation per step; with it the compute
    part step - sync is fitted too, which pins alpha_c/beta_c from very few points. ``init`` warm-starts
    the optimiser (incremental refits as new points arrive; see ``OnlinePolluxFit``).
    ``prior_weight`` scales the regularisation terms described in the module docstring.
    """
    from scipy.optimize import minimize

    nodes, reps, bsz, step, accum, sync = check_points(num_nodes, num_replicas, local_bsz, step_time, sync_time,
                                                       accum_steps)
    n = step.size
    # compute-time target (per micro-step) where it can be read off the data
    comp = None if sync is None else (step - sync) / (accum + 1.0)
    x0 = _pack(init) if init is not None else _pack(default_init(
        bsz, comp if comp is not None else step / (accum + 1.0), step / (accum + 1.0), reps, nodes))

    seen_r = bool(np.any((reps > 1) & (nodes == 1)))
    seen_n = bool(np.any(nodes > 1))
    seen_r_slope = bool(np.any((reps > 2) & (nodes == 1)))
    seen_n_slope = bool(np.any((reps > 2) & (nodes > 1)))
    log_step = np.log(step)
    log_comp = None if comp is None else np.log(np.maximum(comp, _FLOOR))
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
        pred = u_accum * t_grad + t_optim
        total = _robust(np.log(pred)[inverse] - log_step)
        if log_comp is not None:
            total += 0.25 * _robust(np.log(t_grad)[inverse] - log_comp)
        la_n, lb_n, la_r, lb_r = theta[2], theta[3], theta[4], theta[5]
        # across-node all-reduce ~NODE_NET_RATIO x the within-node one (strong prior while either is unseen)
        tie = 0.1 if (seen_n and seen_r) else 10.0
        total += w_prior * tie * (la_n - la_r - _LOG_NODE_RATIO) ** 2
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


def fit_form(form: str, num_nodes, num_replicas, local_bsz, step_time, sync_time=None, accum_steps=None,
             **kwargs):
    """Fit the named form (``FORMS``): PolluxParams, ExtendedParams or BottleneckParams; all work with
    ``predict``."""
    if form == "pollux":
        return fit_pollux(num_nodes, num_replicas, local_bsz, step_time, sync_time, accum_steps, **kwargs)
    if form == "extended":
        from gpuwise.estimate.extended_fit import fit_extended

        return fit_extended(num_nodes, num_replicas, local_bsz, step_time, sync_time, accum_steps, **kwargs)
    if form == "bottleneck":
        from gpuwise.estimate.bottleneck_fit import fit_bottleneck

        return fit_bottleneck(num_nodes, num_replicas, local_bsz, step_time, sync_time, accum_steps, **kwargs)
    from gpuwise.errors import unknown_name

    raise unknown_name("form", form, FORMS)


def relative_errors(params: PolluxParams, num_nodes, num_replicas, local_bsz, step_time,
                    accum_steps=0) -> np.ndarray:
    """|predicted - measured| / measured step time, per point."""
    pred, _ = predict(params, np.asarray(num_nodes), np.asarray(num_replicas), np.asarray(local_bsz),
                      accum_steps)
    meas = np.asarray(step_time, float)
    return np.abs(np.asarray(pred) - meas) / meas


class OnlinePolluxFit:
    """Incremental fitting: keep the measured points, refit with a warm start when new ones arrive."""

    def __init__(self, prior_weight: float = 0.02, form: str = "pollux"):
        self.prior_weight = prior_weight  # see fit_pollux
        self.form = form                  # one of FORMS
        self._rows: list[tuple[float, float, float, float, float, float]] = []
        self.params = None   # PolluxParams / ExtendedParams once >= 2 points

    @property
    def num_points(self) -> int:
        return len(self._rows)

    def observe(self, num_nodes: int, num_replicas: int, local_bsz: float, step_time: float,
                sync_time: float | None = None, accum_steps: int = 0):
        """Add one measured point; refit (warm-started) once there are >= 2 points."""
        self._rows.append((num_nodes, num_replicas, local_bsz, step_time,
                           np.nan if sync_time is None else sync_time, accum_steps))
        if len(self._rows) < 2:
            return None
        a = np.array(self._rows, float)
        sync = None if np.isnan(a[:, 4]).any() else a[:, 4]
        self.params = fit_form(self.form, a[:, 0], a[:, 1], a[:, 2], a[:, 3], sync, a[:, 5],
                               init=self.params, prior_weight=self.prior_weight)
        return self.params
