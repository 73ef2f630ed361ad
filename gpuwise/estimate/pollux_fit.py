"""Moved to ``gpuwise.estimate.fits`` (one module per form, registry in fits/registry.py). Kept so that
code written against the old path still imports; new code imports from the package."""

from gpuwise.estimate.fits.common import (GAMMA_BOUNDS, as_arrays, as_points, check_points,  # noqa: F401
                                          distinct_points, minimise_from, overlapped)
from gpuwise.estimate.fits.online import OnlinePolluxFit  # noqa: F401
from gpuwise.estimate.fits.pollux import PolluxParams, default_init, fit_pollux  # noqa: F401
from gpuwise.estimate.fits.registry import (FORM_ASSUMPTIONS, FORMS, fit_form, predict,  # noqa: F401
                                            relative_errors)
