"""Statistical efficiency: how many optimizer steps a global batch size needs to reach a target.

Pollux (Qiao et al., OSDI'21, eq. 2-3; adaptdl ``goodput.py``) with the AdaScale learning-rate rule:

    phi      = M0 * grad_var / grad_sqr     gradient noise scale (samples); grad_var is the per-step
                                            gradient variance at the reference batch M0 and grad_sqr
                                            the squared norm of the true gradient (as logged by the
                                            Pollux/AdaptDL hooks and in validation-<bsz>.csv)
    gain(M)  = (grad_var + grad_sqr) / (grad_var / s + grad_sqr),   s = M / M0
             = s * (phi + M0) / (phi + M)   progress per step, in steps at M0 (AdaScale's gain ratio)
    E(M)     = gain(M) / s = (phi + M0) / (phi + M)   statistical efficiency in (0, 1], E(M0) = 1

A job that needs P "steps at M0" of progress takes P / gain(M) steps at batch M, i.e. P*M0/E(M)
samples. This is also McCandlish et al.'s S = S_min (1 + B_noise/B) law with B_noise = phi.
Because phi grows during training, ``steps_for_progress`` integrates 1/gain over a phi trace.

Other learning-rate scaling rules (``RULES``), each an assumption stated in the estimate:
- "adascale" (default; Pollux): gain as above.
- "linear": LR scaled linearly with batch (Goyal et al. 2017) and assumed to scale perfectly, gain = s.
  Optimistic upper bound; valid only below the noise scale.
- "sqrt": LR scaled with sqrt(batch) (Krizhevsky 2014 / Hoffer et al. 2017), gain = sqrt(s).
- "none": fixed LR, gain = 1: steps do not fall with batch size (pessimistic bound).

Scavenger (Tyagi & Sharma, CCGrid'23, eq. 6-7 with the intercept of Fig. 9): normalised noise
gamma_bar(B) = a + c / sqrt(B) and epochs to target e = e_star + theta * gamma_bar(B), both fitted by
linear least squares (``ScavengerStatModel``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpuwise.errors import InputError

RULES = ("adascale", "linear", "sqrt", "none")


def gns_moments(big_sq: float, small_sq: float, big_b: float, small_b: float) -> tuple[float, float] | None:
    """Unbiased (|G|^2, tr(Sigma)) from the squared gradient norm measured at two batch sizes
    (McCandlish et al. 2018); None when the batches are the same (one replica: no second size)."""
    if big_b <= small_b:
        return None
    sqr = (big_b * big_sq - small_b * small_sq) / (big_b - small_b)
    var = (small_sq - big_sq) / (1.0 / small_b - 1.0 / big_b)
    return sqr, var


def noise_scale(grad_sqr, grad_var, ref_batch: float):
    """phi = M0 * grad_var / grad_sqr (samples); vectorised. grad_sqr <= 0 gives +inf (pure noise)."""
    sqr = np.asarray(grad_sqr, float)
    var = np.asarray(grad_var, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(sqr > 0, ref_batch * np.maximum(var, 0.0) / np.where(sqr > 0, sqr, 1.0), np.inf)
    return float(phi) if phi.ndim == 0 else phi


def efficiency(batch, phi, ref_batch: float):
    """Pollux E(M) = (phi + M0) / (phi + M); 1 at M = M0, falls towards M0/M for M >> phi."""
    m = np.asarray(batch, float)
    phi = np.asarray(phi, float)
    with np.errstate(invalid="ignore"):
        e = np.where(np.isinf(phi), 1.0, (phi + ref_batch) / (phi + m))
    return float(e) if e.ndim == 0 else e


def gain(batch, phi, ref_batch: float, rule: str = "adascale"):
    """Progress per step at batch M, in steps at the reference batch M0, under a LR scaling rule."""
    if rule not in RULES:
        raise InputError("lr_scaling", rule, "use one of " + ", ".join(RULES))
    s = np.asarray(batch, float) / ref_batch
    if rule == "adascale":
        g = s * np.asarray(efficiency(batch, phi, ref_batch))
    elif rule == "linear":
        g = s
    elif rule == "sqrt":
        g = np.sqrt(s)
    else:
        g = np.ones_like(s)
    return float(g) if np.ndim(g) == 0 else g


def steps_for_progress(target_progress: float, batch: float, ref_batch: float, phi_trace=None,
                       progress_trace=None, phi: float | None = None, rule: str = "adascale") -> float:
    """Optimizer steps at global batch ``batch`` to make ``target_progress`` steps-at-M0 of progress.

    Either a constant ``phi`` or a trace (``progress_trace`` ascending, ``phi_trace`` the noise scale
    measured at those progress points; piecewise constant, each value holding until the next point).
    """
    if target_progress <= 0:
        raise InputError("target_progress", target_progress, "must be > 0")
    if batch <= 0:
        raise InputError("global_batch", batch, "must be > 0")
    if phi_trace is None:
        if phi is None:
            raise InputError("phi", None, "give a noise scale or a measured trace")
        return float(target_progress / gain(batch, phi, ref_batch, rule))
    prog = np.asarray(progress_trace, float)
    phis = np.asarray(phi_trace, float)
    edges = np.concatenate([[0.0], prog[:-1]])  # value i holds on [edges[i], prog[i])
    steps, done = 0.0, 0.0
    for lo, hi, ph in zip(edges, prog, phis):
        if done >= target_progress:
            break
        span = min(hi, target_progress) - max(lo, done)
        if span > 0:
            steps += span / gain(batch, ph, ref_batch, rule)
            done = min(hi, target_progress)
    if done < target_progress:  # beyond the trace: keep the last measured noise scale
        steps += (target_progress - done) / gain(batch, phis[-1], ref_batch, rule)
    return float(steps)


@dataclass(frozen=True)
class NoiseModel:
    """Statistical-efficiency model of one job at a fixed (or typical) gradient noise scale.

    ``samples_at_ref`` is the training amount expressed as samples processed at the reference batch
    (e.g. epochs x dataset size, or tokens / seq_len); steps at batch M = samples_at_ref / M0 / gain(M).
    """

    phi: float              # gradient noise scale in samples (inf = noise-dominated: perfect scaling)
    ref_batch: float        # M0: the batch at which the training amount was measured/specified
    samples_at_ref: float   # training amount, in samples at the reference batch
    rule: str = "adascale"  # learning-rate scaling rule, one of RULES

    def efficiency(self, batch):
        if self.rule == "adascale":
            return efficiency(batch, self.phi, self.ref_batch)
        return np.asarray(gain(batch, self.phi, self.ref_batch, self.rule)) * self.ref_batch / np.asarray(batch, float)

    def steps(self, batch):
        """Optimizer steps to target at global batch ``batch`` (vectorised)."""
        return (self.samples_at_ref / self.ref_batch) / np.asarray(gain(batch, self.phi, self.ref_batch, self.rule))

    def samples(self, batch):
        """Samples processed to target at global batch ``batch``."""
        return self.steps(batch) * np.asarray(batch, float)

    def describe(self) -> str:
        return (f"statistical efficiency: {self.rule} LR scaling, gradient noise scale phi={self.phi:.4g} samples, "
                f"amount given at reference batch {self.ref_batch:g} (Pollux E(M)=(phi+M0)/(phi+M))")


# ---------------------------------------------------------------------------------------------
# Scavenger


@dataclass(frozen=True)
class ScavengerStatModel:
    """Scavenger: gamma_bar(B) = a + c/sqrt(B); epochs(B) = e_star + theta * gamma_bar(B)."""

    a: float          # gamma_bar intercept (noise left at infinite batch)
    c: float          # gamma_bar slope in 1/sqrt(B)
    e_star: float     # epochs for noise-free (full-batch) descent
    theta: float      # epochs per unit of normalised noise

    def gamma_bar(self, batch):
        return self.a + self.c / np.sqrt(np.asarray(batch, float))

    def epochs(self, batch):
        return self.e_star + self.theta * self.gamma_bar(batch)

    def steps(self, batch, dataset_size: float):
        """Scavenger eq. 4: n_i = e * D / B."""
        return self.epochs(batch) * dataset_size / np.asarray(batch, float)


def fit_gamma_bar(batches, gamma_bars) -> tuple[float, float]:
    """Least squares of gamma_bar = a + c / sqrt(B) (Scavenger eq. 7 with intercept); returns (a, c)."""
    b = np.asarray(batches, float)
    g = np.asarray(gamma_bars, float)
    if b.size < 2 or np.unique(b).size < 2:
        raise InputError("batches", b.tolist(), "need noise measured at >= 2 distinct batch sizes")
    X = np.column_stack([np.ones_like(b), 1.0 / np.sqrt(b)])
    (a, c), *_ = np.linalg.lstsq(X, g, rcond=None)
    return float(a), float(c)


def fit_scavenger(batches, gamma_bars, epochs) -> ScavengerStatModel:
    """Fit gamma_bar(B) and then epochs = e_star + theta * gamma_bar (Scavenger eq. 6) by least squares."""
    a, c = fit_gamma_bar(batches, gamma_bars)
    g = np.asarray(gamma_bars, float)
    e = np.asarray(epochs, float)
    if np.ptp(g) > 0:
        theta, e_star = np.polyfit(g, e, 1)
    else:
        theta, e_star = 0.0, float(e.mean())
    return ScavengerStatModel(a, c, float(e_star), float(theta))


def scavenger_gamma_bar_from_stats(batch, phi, per_worker_batch: float):
    """Scavenger's normalised noise from gradient statistics (papers.md B.2 background):
    gamma = (1 + phi/b) / (1 + phi/B) with K = B/b workers, gamma_bar = gamma / K."""
    B = np.asarray(batch, float)
    k = B / per_worker_batch
    return (1.0 + phi / per_worker_batch) / (1.0 + phi / B) / k


def effective_phi(target_progress: float, batch: float, ref_batch: float, phi_trace, progress_trace) -> float:
    """The constant noise scale that needs the same number of steps at ``batch`` as the measured trace
    (so a constant-phi NoiseModel is exact there and close elsewhere): solves s(phi+M0)/(phi+M) = g."""
    steps = steps_for_progress(target_progress, batch, ref_batch, phi_trace, progress_trace)
    g = target_progress / steps
    s = batch / ref_batch
    if g >= s * (1 - 1e-9):
        return math.inf
    if g <= 1.0:
        return 0.0
    return float((g * batch - s * ref_batch) / (s - g))


@dataclass(frozen=True)
class ScavengerTraceFit:
    """Scavenger's statistical model fitted on one Pollux application's validation traces."""

    app: str
    model: ScavengerStatModel
    batches: tuple[int, ...]
    gamma_bars: tuple[float, ...]      # measured normalised noise per batch
    epochs: tuple[float, ...]          # measured epochs to the target per batch
    gamma_fit_error: float             # median |fit - measured| / measured of gamma_bar
    epochs_fit_error: float            # same for epochs


def fit_scavenger_from_pollux(app: str) -> ScavengerTraceFit:
    """Fit gamma_bar(B) = a + c/sqrt(B) and e = e* + theta*gamma_bar on the bundled Pollux traces.

    Per validation file (global batch B): gamma_bar from the logged gradient statistics over the
    second half of training (median noise scale; per-worker batch = the reference batch M0, so
    gamma_bar = (phi + M0)/(phi + B)), and the epochs until the app's target metric is first reached
    (iterations x B / dataset size). Pollux's runs scale the learning rate with AdaScale, so epochs
    *grow* with B and theta comes out negative -- the opposite of Scavenger's fixed-LR runs
    (papers.md B.8, pitfall 2).
    """
    from gpuwise.workload.pollux_traces import load_app_info, load_validation

    info = load_app_info(app)
    val = load_validation(app)
    m0 = min(val)
    bs, gbs, eps = [], [], []
    for b, rows in val.items():
        hit = next((r for r in rows if info.reached(r.metric)), None)
        if hit is None:
            continue
        half = rows[len(rows) // 2:]
        phis = noise_scale([r.grad_sqr for r in half], [r.grad_var for r in half], m0)
        phi = float(np.median(np.asarray(phis)[np.isfinite(phis)])) if np.isfinite(phis).any() else math.inf
        bs.append(b)
        gbs.append(float(scavenger_gamma_bar_from_stats(b, phi, m0)))
        eps.append(hit.iteration * b / info.dataset_size)
    model = fit_scavenger(bs, gbs, eps)
    g_err = float(np.median(np.abs(model.gamma_bar(bs) - np.array(gbs)) / np.array(gbs)))
    e_err = float(np.median(np.abs(model.epochs(bs) - np.array(eps)) / np.array(eps)))
    return ScavengerTraceFit(app, model, tuple(bs), tuple(gbs), tuple(eps), g_err, e_err)
