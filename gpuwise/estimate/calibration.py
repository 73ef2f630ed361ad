"""Measured calibration of a job's goodput object: what real steps on real shapes say about its
predictions, as a correction the goodput object (`gpuwise.estimate.goodput.JobGoodput`) applies.

AdaptDL fits its goodput function's parameters on the profile of the running job; here the analytic
model keeps its form (layout search, roofline step time, memory model) and only its *scale* is fitted
on measurements, per GPU type:

- step time: one multiplicative factor per GPU type, the median over measured steps of
  measured / predicted step seconds (each observation -- e.g. a chunk of k steps at one shape --
  counts k times). The median, not a least-squares ratio, because a run's first chunk pays
  warm-up (allocator, caches, lazy imports) that must not drag the factor: half the steps would have
  to be outliers to move it. The factor applies from ``MIN_STEPS`` measured steps of the type on; a
  type not measured is not corrected (a ratio on one chip says nothing about another's efficiency).
  The layout choice on a shape is unchanged (every layout of a type is scaled alike).
- peak memory (CUDA only, ``torch.cuda.max_memory_reserved``, compared with the predicted reserved
  peak): on a measured shape (GPU type, GPU count, global batch) the measured peak (the largest seen)
  replaces the prediction; on other shapes of the type the prediction is multiplied by the median
  measured / predicted ratio of the measured shapes, but never lowered (ratio floored at 1): an
  under-prediction costs an out-of-memory crash, an over-prediction only a wider allocation. The
  device total and the required memory move by the same number of bytes as the reserved peak. Which
  layouts fit is still decided by the uncalibrated memory model (the correction is reported, not
  searched: it was measured on the runtime's layout only).

Everything here is pure: `fit_calibration` turns observations into a `Calibration`; `Calibration.apply`
corrects one `RunOption`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from gpuwise.estimate.layout_search import RunOption

MIN_STEPS = 5          # measured steps of a GPU type before its step-time factor applies
MAX_OBSERVATIONS = 2000   # chunks a goodput object keeps (the newest): a job of a million steps refits in
#                           bounded time, and its factor follows what the job does now


@dataclass(frozen=True)
class Observation:
    """What the runtime measured on one shape (one chunk of ``steps`` steps), and what the uncalibrated
    goodput object predicted there (None: nothing the model allows fits that shape)."""

    gpu: str                                  # GPU type of the allocation
    gpus: int                                 # GPUs (data-parallel width)
    nodes: int
    batch: int                                # global batch
    steps: int                                # steps the measured mean is over
    measured_step_s: float
    predicted_step_s: float | None
    measured_peak_gib: float | None = None    # torch.cuda.max_memory_reserved (None: not on CUDA)
    predicted_peak_gib: float | None = None   # the model's reserved peak at the shape


def _positive(v: float | None) -> bool:
    """A usable measurement or prediction: finite and above zero (not None, NaN, inf or 0)."""
    return v is not None and math.isfinite(v) and v > 0


def step_factor(observations: list[Observation]) -> float | None:
    """Median of measured / predicted step time over the observations' steps (an observation of k
    steps counts k times); None with fewer than MIN_STEPS steps that have a prediction."""
    obs = [o for o in observations if _positive(o.predicted_step_s) and _positive(o.measured_step_s) and o.steps > 0]
    if sum(o.steps for o in obs) < MIN_STEPS:
        return None
    ratios = np.repeat([o.measured_step_s / o.predicted_step_s for o in obs], [o.steps for o in obs])
    return float(np.median(ratios))


def measured_peaks(observations: list[Observation]) -> dict[tuple[int, int], tuple[float, float]]:
    """(GPUs, global batch) -> (largest measured peak GiB, predicted peak GiB) of the shapes measured on CUDA."""
    out: dict[tuple[int, int], tuple[float, float]] = {}
    for o in observations:
        if not (_positive(o.measured_peak_gib) and _positive(o.predicted_peak_gib)):
            continue
        key = (o.gpus, o.batch)
        seen = out.get(key, (0.0, o.predicted_peak_gib))[0]
        out[key] = (max(seen, o.measured_peak_gib), o.predicted_peak_gib)
    return out


def memory_factor(peaks: dict[tuple[int, int], tuple[float, float]]) -> float:
    """What unmeasured shapes' peaks are multiplied by: the median measured / predicted ratio of the
    measured shapes, floored at 1 (never lowered); 1 with no measured shape."""
    if not peaks:
        return 1.0
    return max(1.0, float(np.median([m / p for m, p in peaks.values()])))


@dataclass(frozen=True)
class TypeCalibration:
    """The correction of one GPU type."""

    gpu: str
    steps: int                       # measured steps with a prediction
    shapes: int                      # distinct (GPUs, batch) shapes they ran on
    step_factor: float | None        # None: fewer than MIN_STEPS steps, no step correction yet
    peaks: dict = field(default_factory=dict)   # measured_peaks
    memory_factor: float = 1.0

    def note(self) -> str:
        step = (f"step time on {self.gpu} scaled by {self.step_factor:.3g} (median measured/predicted) from "
                f"{self.steps} measured steps on {self.shapes} shape{'s' * (self.shapes != 1)}"
                if self.step_factor is not None else
                f"step time on {self.gpu} not calibrated yet: {self.steps} of the {MIN_STEPS} measured steps needed")
        if not self.peaks:
            return step + "; peak memory not measured (no CUDA rows)"
        return (step + f"; peak memory measured on {len(self.peaks)} shape{'s' * (len(self.peaks) != 1)} "
                f"(replaces the prediction there), other shapes' peaks x {self.memory_factor:.3g} (never lowered)")


@dataclass(frozen=True)
class Calibration:
    """Per GPU type corrections fitted on a job's observations (empty: the identity)."""

    types: dict[str, TypeCalibration] = field(default_factory=dict)

    def calibrated(self, gpu: str) -> bool:
        """Whether step times on ``gpu`` are corrected (MIN_STEPS measured steps there)."""
        t = self.types.get(gpu)
        return t is not None and t.step_factor is not None

    def factor(self, gpu: str) -> float:
        t = self.types.get(gpu)
        return 1.0 if t is None or t.step_factor is None else t.step_factor

    def peak_gib(self, gpu: str, gpus: int, batch: int, predicted: float) -> float:
        """The calibrated reserved peak of a shape whose uncalibrated prediction is ``predicted`` GiB."""
        t = self.types.get(gpu)
        if t is None:
            return predicted
        seen = t.peaks.get((gpus, batch))
        return seen[0] if seen is not None else predicted * t.memory_factor

    def apply(self, opt: RunOption | None) -> RunOption | None:
        """``opt`` with its step time, time to target and memory corrected (itself where nothing applies)."""
        t = None if opt is None else self.types.get(opt.gpu)
        if t is None:
            return opt
        k = self.factor(opt.gpu)
        changes: dict = {}
        if k != 1.0:
            changes = {"step_time_s": opt.step_time_s * k, "train_hours": opt.train_hours * k,
                       "mfu": None if opt.mfu is None else opt.mfu / k}
        if opt.memory_reserved_gib is not None and t.peaks:
            delta = self.peak_gib(opt.gpu, opt.gpus, opt.global_batch, opt.memory_reserved_gib) - opt.memory_reserved_gib
            if delta:
                changes.update(memory_reserved_gib=opt.memory_reserved_gib + delta, memory_gib=opt.memory_gib + delta,
                               memory_required_gib=None if opt.memory_required_gib is None
                               else opt.memory_required_gib + delta)
        return replace(opt, **changes) if changes else opt

    def notes(self) -> list[str]:
        return [t.note() for _, t in sorted(self.types.items())]


def fit_calibration(observations: list[Observation]) -> Calibration:
    """The calibration of a job from all its observations (see the module docstring for the rules)."""
    by_type: dict[str, list[Observation]] = {}
    for o in observations:
        by_type.setdefault(o.gpu, []).append(o)
    types = {}
    for gpu, obs in by_type.items():
        timed = [o for o in obs if o.predicted_step_s]
        peaks = measured_peaks(obs)
        types[gpu] = TypeCalibration(gpu, sum(o.steps for o in timed), len({(o.gpus, o.batch) for o in timed}),
                                     step_factor(obs), peaks, memory_factor(peaks))
    return Calibration(types)
