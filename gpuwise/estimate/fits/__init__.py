"""Fitted step-time forms, one module per form (pollux, extended, bottleneck, affine), shared helpers in
``common`` and the registry (name -> Form) in ``registry``; ``predict``/``fit_form`` dispatch on it.
Import order: common <- forms <- registry <- online; no module imports this package's root."""

from gpuwise.estimate.fits.registry import (FORM_ASSUMPTIONS, FORMS, REGISTRY, Form, fit_form, form_of, get_form,
                                            predict, relative_errors)

__all__ = ["FORM_ASSUMPTIONS", "FORMS", "REGISTRY", "Form", "fit_form", "form_of", "get_form", "predict",
           "relative_errors"]
