"""Incremental fitting of any registered form as measured points arrive (warm-started refits)."""

from __future__ import annotations

import numpy as np

from gpuwise.estimate.fits.registry import fit_form


class OnlinePolluxFit:
    """Incremental fitting: keep the measured points, refit with a warm start when new ones arrive."""

    def __init__(self, prior_weight: float = 0.02, form: str = "pollux"):
        self.prior_weight = prior_weight  # see fit_pollux
        self.form = form                  # a registry name
        self._rows: list[tuple[float, float, float, float, float, float]] = []
        self.params = None   # fitted parameters once >= 2 points

    @property
    def num_points(self) -> int:
        return len(self._rows)

    def observe(self, num_nodes: int, num_replicas: int, local_bsz: float, step_time: float,
                sync_time: float | None = None, grad_accum: int = 1):
        """Add one measured point; refit (warm-started) once there are >= 2 points."""
        self._rows.append((num_nodes, num_replicas, local_bsz, step_time,
                           np.nan if sync_time is None else sync_time, grad_accum))
        if len(self._rows) < 2:
            return None
        a = np.array(self._rows, float)
        sync = None if np.isnan(a[:, 4]).any() else a[:, 4]
        self.params = fit_form(self.form, a[:, 0], a[:, 1], a[:, 2], a[:, 3], sync, a[:, 5],
                               init=self.params, prior_weight=self.prior_weight)
        return self.params
