"""Per-GPU memory that tensors don't show: the caching allocator's reserve beyond the live tensors,
the CUDA context and library workspaces, and NCCL's communication buffers.

device total = allocated peak (tensors) + allocator slack (reserved - allocated) + context + NCCL

- Allocator slack: PyTorch's caching allocator keeps freed blocks reserved and cannot always reuse
  them for differently sized requests (large requests are rounded up to 2 MiB multiples and served
  from segments that are split, not merged across segments; blocks freed on one stream are not reused
  by another, which FSDP's all-gather stream makes worse). Model: FRAGMENTATION x the allocated peak,
  a least-squares fit (relative error of max_memory_reserved) on 13 training-step peaks measured in
  public runs, allocated next to reserved, from 4 sources (llama-cookbook PRs #41/#165/#650: Llama-7B
  FSDP; Liger-Kernel PR #110: Llama-3-8B; Megatron-LM issue #60: GPT-2 2.6B; peft issue #1469: BERT-size
  models), gpuwise/data/measured/allocator_reserved_vs_allocated.csv. The measured ratio spreads widely
  (3% to 80% of the allocated peak): the fit's median error of reserved is 11%, its largest 31%; see
  `gpuwise.validation.memory.calibrate_overhead` (a test holds the constant to it). The allocated peak is
  the regressor because it is what the rows state (their activation / state split is not); runs whose
  peak is mostly resident states (Megatron-style, optimizer-heavy) tend to keep less slack than this.
  The two HF BERT-large nvidia-smi totals the previous fit (44.7% of activations + temporaries) used are
  now out-of-sample validation rows. With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow
  in place and most of this slack disappears (PyTorch CUDA semantics notes); the default (off) is assumed.
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
# reserved - allocated at the peak, as a fraction of the allocated peak: least-squares fit (relative
# error of reserved) on the `use=fit` rows of measured/allocator_reserved_vs_allocated.csv (13 rows,
# 4 sources; see the module docstring); calibrate_overhead() recomputes it.
FRAGMENTATION = 0.235
CALIBRATION_ROWS = 13
CALIBRATION_SOURCES = 4
NCCL_BUFFSIZE_MIB = 4
NCCL_CHANNELS = 16


def allocator_slack_bytes(allocated: float) -> float:
    """reserved - allocated at the peak, for an `allocated` peak of live tensor bytes."""
    return FRAGMENTATION * allocated


def context_bytes(context: bool = True) -> float:
    return CONTEXT_MIB * MIB if context else 0.0


def nccl_bytes(group_sizes: tuple[int, ...]) -> float:
    """NCCL buffers for one communicator per parallel group with more than one rank."""
    comms = sum(1 for g in group_sizes if g > 1)
    return comms * NCCL_BUFFSIZE_MIB * MIB * 2 * NCCL_CHANNELS


def overhead_bytes(allocated: float, context: bool = True) -> float:
    """Context + allocator slack for an `allocated` peak (no NCCL): the single-GPU case."""
    return context_bytes(context) + allocator_slack_bytes(allocated)


def describe() -> str:
    return (f"overhead (not in tensors): CUDA context + cuBLAS workspaces {CONTEXT_MIB} MiB (lazy module loading; "
            f"PyTorch issues #107667/#109888), allocator slack (reserved - allocated) = {FRAGMENTATION:.1%} of "
            f"the allocated peak (least-squares fit on {CALIBRATION_ROWS} measured training peaks from "
            f"{CALIBRATION_SOURCES} public sources; measured 3-80%, median error of reserved 11%), "
            f"NCCL {NCCL_BUFFSIZE_MIB} MiB x 2 neighbours x {NCCL_CHANNELS} channels per "
            "communicator (NCCL_BUFFSIZE default; channel count assumed, not calibrated); "
            "expandable_segments off")
