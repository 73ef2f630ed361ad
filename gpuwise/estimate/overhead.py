"""Per-GPU memory that is neither model state nor activations: CUDA context and workspaces,
caching-allocator fragmentation and transient buffers.

Model: overhead = CONTEXT_GIB + FRAGMENTATION * activations

- CONTEXT_GIB: the CUDA context, cuBLAS/cuDNN workspaces and NCCL buffers present before the
  first tensor. Hugging Face's "model memory anatomy" doc measures 1343 MB of device memory after
  its first 1-element CUDA tensor (gpuwise/data/measured/hf_transformers_docs_bert_large_memory.csv
  is the same page).
- FRAGMENTATION: what PyTorch's caching allocator reserves beyond the live tensors, plus the
  transient buffers of backward (gradients of activations, matmul outputs), as a fraction of the
  activation memory, which is allocated and freed every step. Least-squares fit
  on the measured device-total rows that state their batch and sequence length (the two
  HF-Transformers BERT-large rows); `gpuwise.validation.memory.calibrate_overhead` recomputes it
  and a test checks that these constants equal the fit.
"""

from __future__ import annotations

GIB = 2 ** 30

CONTEXT_GIB = 1343 / 1024          # 1343 MiB, HF model-memory-anatomy doc
FRAGMENTATION = 0.279              # fitted: see module docstring (2 rows)
CALIBRATION_ROWS = 2


def overhead_bytes(activations: float, context: bool = True) -> float:
    """Overhead bytes for one GPU (context=False for measurements of allocated tensors only)."""
    return (CONTEXT_GIB * GIB if context else 0.0) + FRAGMENTATION * activations


def describe() -> str:
    return (f"overhead = {CONTEXT_GIB:.2f} GiB CUDA context/workspaces (HF docs' measured 1343 MB) + "
            f"{FRAGMENTATION:.1%} of activations for allocator fragmentation and backward "
            f"temporaries (least-squares fit on {CALIBRATION_ROWS} measured device-total rows, "
            "gpuwise validate memory)")
