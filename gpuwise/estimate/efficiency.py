"""Achieved fraction of a GPU's peak FLOPS, by architecture and problem size.

Model: one micro-step takes ``t0 + flops / (e_max * peak)``: a large problem runs at ``e_max`` of the
dense peak; small problems pay a fixed per-micro-step overhead ``t0`` (kernel launches, data loading,
layers too small to fill the GPU), so efficiency = flops / (peak * time) rises with problem size and
saturates at e_max. Values per (architecture, unit) come from ``gpuwise/data/calibration/efficiency.csv``
with how many measured points fitted each (0 = a stated assumption).

Workload class: e_max of tensor units is calibrated on large transformer GEMMs. Explicit models (CNNs,
speech, recommendation) spend most of their time in bandwidth-bound layers, so their micro-step is
``t0 + max(FLOPs / (e_max * peak), traffic / HBM bandwidth)`` (a roofline) with the HBM traffic per
sample = ``traffic_ratio`` x the preset's saved-activation bytes (at the training precision), the ratio
calibrated on one published measurement (``gpuwise/data/calibration/roofline.csv``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path, read_commented_csv
from gpuwise.hardware.types import GpuSpec

# precision of a TrainingConfig -> GpuSpec.peak_tflops dtype
# fp8: the bf16 peak times every op but the GEMMs, which roofline_step runs at the fp8 peak (MFU against bf16)
COMPUTE_DTYPE = {"bf16-mixed": "bf16", "fp16-mixed": "fp16", "bf16": "bf16", "fp32": "fp32", "tf32": "tf32",
                 "fp8": "bf16"}


@dataclass(frozen=True)
class Efficiency:
    """Calibrated efficiency of one (architecture, unit)."""

    architecture: str
    unit: str            # "tensor" | "fp32"
    e_max: float         # achieved / peak for large problems
    t0_s: float          # fixed overhead per micro-step (s)
    points: int          # measurements it was fitted on (0 = assumption)
    source: str

    def fraction(self, flops: float, peak_flops: float) -> float:
        """Achieved / peak for a micro-step of ``flops`` on a GPU of ``peak_flops``."""
        if flops <= 0:
            return self.e_max
        t = self.t0_s + flops / (self.e_max * peak_flops)
        return flops / (peak_flops * t)

    def describe(self) -> str:
        src = self.source.removeprefix("assumption: ").removeprefix("assumption ")
        how = f"fitted on {self.points} measurements ({src})" if self.points else f"assumption: {src}"
        return (f"compute efficiency {self.architecture}/{self.unit}: {self.e_max:.0%} of dense peak for large "
                f"problems, +{self.t0_s * 1e3:.0f} ms per micro-step; {how}")


@lru_cache(maxsize=1)
def _table() -> dict[tuple[str, str], Efficiency]:
    rows = {}
    for r in read_commented_csv(data_path("calibration", "efficiency.csv")):
        rows[(r["architecture"], r["unit"])] = Efficiency(r["architecture"], r["unit"], float(r["e_max"]),
                                                          float(r["t0_s"]), int(r["points"]), r["source"])
    return rows


def compute_unit(gpu: GpuSpec, precision: str) -> tuple[str, float]:
    """("tensor" | "fp32", dense peak FLOPS) used by a precision on this GPU."""
    dtype = COMPUTE_DTYPE.get(precision, "bf16")
    peak = gpu.peak_tflops(dtype)
    unit = "fp32" if (dtype == "fp32" or peak == gpu.fp32_tflops) else "tensor"
    return unit, peak * 1e12


def efficiency_for(gpu: GpuSpec, unit: str) -> Efficiency:
    arch = gpu.architecture.split()[0]
    t = _table()
    if (arch, unit) in t:
        return t[(arch, unit)]
    if unit == "tensor" and (arch, "fp32") in t and not gpu.fp16_tflops:
        return t[(arch, "fp32")]
    return t[("default", unit)]


@dataclass(frozen=True)
class Roofline:
    """HBM traffic model of one workload class (see module docstring)."""

    workload_class: str
    traffic_ratio: float   # HBM bytes moved per byte of saved activations, per training sample
    points: int            # measurements it was calibrated on
    source: str

    def describe(self) -> str:
        return (f"roofline for {self.workload_class} models: HBM traffic = {self.traffic_ratio:.1f} x saved "
                f"activation bytes per sample, calibrated on {self.points} measurement(s) ({self.source})")


@lru_cache(maxsize=1)
def roofline(workload_class: str = "explicit") -> Roofline:
    for r in read_commented_csv(data_path("calibration", "roofline.csv")):
        if r["workload_class"] == workload_class:
            return Roofline(r["workload_class"], float(r["traffic_ratio"]), int(r["points"]), r["source"])
    raise KeyError(workload_class)


def memory_traffic_bytes(model, precision: str) -> float | None:
    """HBM bytes moved per training sample of an explicit model (None if it has no activation size).
    Preset activation bytes are fp32; 16-bit training moves half."""
    act = getattr(model, "activation_bytes_per_sample", None)
    if not act:
        return None
    value = 4.0 if COMPUTE_DTYPE.get(precision, "bf16") in ("fp32", "tf32") else 2.0
    return roofline().traffic_ratio * act * value / 4.0
