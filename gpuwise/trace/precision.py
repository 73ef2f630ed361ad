"""Parameter, compute and optimizer dtypes of each training precision (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

_HALF = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Dtypes:
    param: torch.dtype            # dtype the (sharded) parameters are stored in
    compute: torch.dtype | None   # autocast-style compute dtype over param (None: compute in param dtype)
    fsdp_param: torch.dtype | None   # FSDP2 MixedPrecisionPolicy.param_dtype (unsharded params)
    frozen: torch.dtype           # LoRA/QLoRA frozen base (16-bit under any 16-bit precision)
    adapter: torch.dtype          # LoRA adapters (PEFT upcasts them to fp32 under mixed precision)


def dtypes(precision: str, fsdp: bool) -> Dtypes:
    if precision == "fp32":
        return Dtypes(torch.float32, None, None, torch.float32, torch.float32)
    half = _HALF[precision]
    if precision == "bf16":
        return Dtypes(half, None, None, half, half)
    if fsdp:
        return Dtypes(torch.float32, None, half, half, torch.float32)
    return Dtypes(torch.float32, half, None, half, torch.float32)
