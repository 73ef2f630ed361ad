"""Per-GPU memory that tensors don't show: the caching allocator's reserve beyond the live tensors,
the CUDA context and library workspaces, and NCCL's communication buffers.

device total = allocated peak (tensors) + allocator slack (reserved - allocated) + context + NCCL

- Allocator slack: PyTorch's caching allocator keeps freed blocks reserved and cannot always reuse
  them for differently sized requests (large requests are rounded up to 2 MiB multiples and served
  from segments that are split, not merged across segments). The slack grows with the bytes
  allocated and freed every step: activations, gradient and loss temporaries, FSDP's gathered
  copies. Model: FRAGMENTATION x (activations + temporaries), a least-squares fit on the two
  HF-Transformers BERT-large device totals (gpuwise/data/measured/hf_transformers_docs_bert_large_memory.csv;
  `gpuwise.validation.memory.calibrate_overhead` recomputes it, a test holds the constant to it).
  With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow in place and most of this
  slack disappears (PyTorch CUDA semantics notes); the default (off) is assumed.
- CUDA context and workspaces: with lazy module loading (CUDA >= 11.7, PyTorch's default) the
  context takes ~300-400 MB (PyTorch maintainers in pytorch/pytorch#107667 and #109888; 426 MiB by
  nvidia-smi with PyTorch 2.10/CUDA 13 on an RTX 6000 Ada, unsloth-zoo PR #1053), plus PyTorch's
  cuBLAS workspaces (CUBLAS_WORKSPACE_CONFIG default 2 x 4 MiB + 8 x 16 KiB before Hopper, 32 MiB
  chunks on Hopper and later) -> CONTEXT_MIB. Without lazy loading every kernel is loaded up
  front: 1343 MB measured after the first tensor in Hugging Face's "model memory anatomy" doc
  (EAGER_CONTEXT_MIB; the BERT rows were measured that way).
- NCCL: each communicator of more than one rank allocates NCCL_BUFFSIZE (default 4 MiB, NCCL
  environment-variable docs) per channel per ring neighbour (2); NCCL_CHANNELS channels assumed.
  Not calibrated on a measurement: an order of magnitude (~128 MiB per communicator).
"""

from __future__ import annotations

from gpuwise.hardware.types import CUDA_CONTEXT_MIB

GIB = 2 ** 30
MIB = 2 ** 20

CONTEXT_MIB = CUDA_CONTEXT_MIB       # lazy-loaded CUDA context + cuBLAS workspaces (see docstring)
EAGER_CONTEXT_MIB = 1343            # HF model-memory-anatomy doc, first 1-element tensor
FRAGMENTATION = 0.447               # fitted: see module docstring (2 rows)
CALIBRATION_ROWS = 2
NCCL_BUFFSIZE_MIB = 4
NCCL_CHANNELS = 16


def allocator_slack_bytes(transient: float) -> float:
    """reserved - allocated at the peak, for `transient` bytes allocated and freed every step."""
    return FRAGMENTATION * transient


def context_bytes(context: bool = True) -> float:
    return CONTEXT_MIB * MIB if context else 0.0


def nccl_bytes(group_sizes: tuple[int, ...]) -> float:
    """NCCL buffers for one communicator per parallel group with more than one rank."""
    comms = sum(1 for g in group_sizes if g > 1)
    return comms * NCCL_BUFFSIZE_MIB * MIB * 2 * NCCL_CHANNELS


def overhead_bytes(activations: float, context: bool = True) -> float:
    """Context + allocator slack for `activations` transient bytes (no NCCL): the single-GPU case."""
    return context_bytes(context) + allocator_slack_bytes(activations)


def describe() -> str:
    return (f"overhead (not in tensors): CUDA context + cuBLAS workspaces {CONTEXT_MIB} MiB (lazy module loading; "
            f"PyTorch issues #107667/#109888), allocator slack (reserved - allocated) = {FRAGMENTATION:.1%} of "
            f"the activations and temporaries (least-squares fit on {CALIBRATION_ROWS} measured HF BERT-large "
            f"device totals), NCCL {NCCL_BUFFSIZE_MIB} MiB x 2 neighbours x {NCCL_CHANNELS} channels per "
            "communicator (NCCL_BUFFSIZE default; channel count assumed, not calibrated); "
            "expandable_segments off")
