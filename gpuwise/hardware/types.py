"""Typed records of the hardware layer. Loaders live in `gpus.py` and `catalog.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

# The CUDA context and PyTorch's cuBLAS workspaces a training process holds before its first tensor,
# with lazy module loading (CUDA >= 11.7, PyTorch's default): ~300-400 MB per the PyTorch maintainers
# (pytorch/pytorch#107667, #109888), 426 MiB measured with PyTorch 2.10 / CUDA 13 (unsloth-zoo PR #1053),
# + 2 x 32 MiB cuBLAS workspace chunks (Hopper). Used for `GpuSpec.usable_gib`.
CUDA_CONTEXT_MIB = 464


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model, from `gpuwise/data/gpus.csv` (every value cites its source there).

    Peak TFLOPS are dense (no 2:4 sparsity) tensor-core numbers for the named datatype;
    None where the part has no such unit (e.g. fp8 before Hopper/Ada).
    """

    name: str                      # canonical name, e.g. "A100-80GB-SXM"
    vendor: str                    # "nvidia" | "amd"
    architecture: str              # e.g. "Ampere"
    memory_gib: float              # datasheet memory ("80GB"), as the vendor states it
    fp32_tflops: float             # non-tensor FP32
    tf32_tflops: float | None
    bf16_tflops: float | None      # dense bf16 tensor
    fp16_tflops: float | None      # dense fp16 tensor
    fp8_tflops: float | None
    hbm_gbps: float                # device memory bandwidth, GB/s
    intra_node_gbps: float         # per-GPU unidirectional GPU-GPU bandwidth within a node, GB/s
    interconnect: str              # "NVLink4", "PCIe4", ...
    form_factor: str               # "SXM", "PCIe", "OAM", ...
    source: str                    # where the numbers come from (datasheet URL / document)
    aliases: tuple[str, ...] = field(default=())
    device_mib: float | None = None    # total device memory as cudaMemGetInfo / nvidia-smi report it (MiB)
    device_mib_source: str = ""

    @cached_property     # frozen fields; the planner's fit tests read it ~26,000 times
    def total_gib(self) -> float:
        """Device memory in GiB as the driver reports it (the datasheet figure read as GB when unknown)."""
        return self.device_mib / 1024 if self.device_mib else self.memory_gib * 1e9 / 2 ** 30

    @property
    def usable_gib(self) -> float:
        """What PyTorch can allocate: device memory less the CUDA context and workspaces."""
        return self.total_gib - CUDA_CONTEXT_MIB / 1024

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak for a compute datatype: fp32 | tf32 | bf16 | fp16 | fp8 (falls back to
        the best lower-precision-free unit the part has, e.g. bf16 on V100 -> fp16)."""
        order = {
            "fp8": (self.fp8_tflops, self.bf16_tflops, self.fp16_tflops),
            "bf16": (self.bf16_tflops, self.fp16_tflops),
            "fp16": (self.fp16_tflops, self.bf16_tflops),
            "tf32": (self.tf32_tflops, self.fp32_tflops),
            "fp32": (self.fp32_tflops,),
        }[dtype]
        for v in order:
            if v:
                return float(v)
        return float(self.fp32_tflops)


@dataclass(frozen=True)
class Offering:
    """One rentable instance type in one zone of one cloud, from a SkyPilot v8 vms.csv."""

    cloud: str                     # "aws" | "gcp" | "azure" | "lambda"
    region: str
    zone: str | None
    instance_type: str
    gpu: str                       # canonical GpuSpec.name
    gpus_per_node: float           # may be fractional on some clouds (shared GPUs)
    vcpus: float | None
    memory_gib: float | None       # host memory
    price_usd_per_hour: float | None        # on-demand, whole instance (GCP: host + GPUs)
    spot_price_usd_per_hour: float | None   # None when the cloud sells no spot here
    catalog_date: str              # ISO date of the catalog snapshot the prices come from
    catalog_source: str            # file the row came from

    def hourly(self, spot: bool) -> float | None:
        return self.spot_price_usd_per_hour if spot else self.price_usd_per_hour

    def usd_per_gpu_hour(self, spot: bool = False) -> float | None:
        p = self.hourly(spot)
        return None if p is None or not self.gpus_per_node else p / self.gpus_per_node
