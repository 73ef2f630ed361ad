"""The registry of fitted step-time forms: name -> Form (its parameters, fit, predict, assumption).

Every form is fitted to the same measured columns (nodes, replicas, local batch, step time, optional
sync time and grad_accum = micro-steps per optimizer step) and predicts (step_time, sync_time).
Forms live one per module in this package; this module imports them, they never import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpuwise.estimate.fits import affine, bottleneck, extended, pollux


@dataclass(frozen=True)
class Form:
    name: str
    params_type: type
    fit: Callable        # fit(num_nodes, num_replicas, local_bsz, step_time, sync_time=None, grad_accum=None, **kw)
    predict: Callable    # predict(params, num_nodes, num_replicas, local_bsz, grad_accum=1) -> (step, sync)
    assumption: str      # one line for the output of anything that fits it


REGISTRY: dict[str, Form] = {f.name: f for f in (
    Form(pollux.NAME, pollux.PolluxParams, pollux.fit_pollux, pollux.predict_pollux, pollux.ASSUMPTION),
    Form(extended.NAME, extended.ExtendedParams, extended.fit_extended, extended.predict_extended,
         extended.ASSUMPTION),
    Form(bottleneck.NAME, bottleneck.BottleneckParams, bottleneck.fit_bottleneck, bottleneck.predict_bottleneck,
         bottleneck.ASSUMPTION),
    Form(affine.NAME, affine.AffineStepTime, affine.fit_affine_points, affine.predict_affine, affine.ASSUMPTION),
)}
# forms `gpuwise fit --form` offers (placement-aware; the affine form ignores nodes and overlap)
FORMS = ("pollux", "extended", "bottleneck")
FORM_ASSUMPTIONS = {name: f.assumption for name, f in REGISTRY.items()}


def get_form(name: str) -> Form:
    if name not in REGISTRY:
        from gpuwise.errors import unknown_name

        raise unknown_name("form", name, tuple(REGISTRY))
    return REGISTRY[name]


def form_of(params) -> Form:
    """The form a fitted parameter set belongs to."""
    for f in REGISTRY.values():
        if isinstance(params, f.params_type):
            return f
    raise TypeError(f"not a fitted step-time form: {type(params).__name__}")


def predict(params, num_nodes, num_replicas, local_bsz, grad_accum=1):
    """(step_time, sync_time) in seconds of any fitted form, vectorised; global batch =
    num_replicas * local_bsz * grad_accum."""
    return form_of(params).predict(params, num_nodes, num_replicas, local_bsz, grad_accum)


def fit_form(form: str, num_nodes, num_replicas, local_bsz, step_time, sync_time=None, grad_accum=None, **kwargs):
    """Fit the named form to measured points (>= 2; priors make 2-5 points usable)."""
    return get_form(form).fit(num_nodes, num_replicas, local_bsz, step_time, sync_time, grad_accum, **kwargs)


def relative_errors(params, num_nodes, num_replicas, local_bsz, step_time, grad_accum=1) -> np.ndarray:
    """|predicted - measured| / measured step time, per point."""
    pred, _ = predict(params, np.asarray(num_nodes), np.asarray(num_replicas), np.asarray(local_bsz), grad_accum)
    meas = np.asarray(step_time, float)
    return np.abs(np.asarray(pred) - meas) / meas
