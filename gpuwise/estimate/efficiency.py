"""Achieved fraction of a GPU's peak FLOPS, by architecture and problem size.

Model: one micro-step takes ``t0 + flops / (e_max * peak)``: a large problem runs at ``e_max`` of the
dense peak; small problems pay a fixed per-micro-step overhead ``t0`` (kernel launches, data loading,
layers too small to fill the GPU), so efficiency = flops / (peak * time) rises with problem size and
saturates at e_max. Values per (architecture, unit) come from ``gpuwise/data/calibration/efficiency.csv``
with how many measured points fitted each (0 = a stated assumption).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path
from gpuwise.hardware.types import GpuSpec

# precision of a TrainingConfig -> GpuSpec.peak_tflops dtype
COMPUTE_DTYPE = {"bf16-mixed": "bf16", "fp16-mixed": "fp16", "bf16": "bf16", "fp32": "fp32", "tf32": "tf32"}


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
    with open(data_path("calibration", "efficiency.csv"), newline="") as fh:
        for r in csv.DictReader(line for line in fh if not line.startswith("#")):
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
