"""Per-GPU memory that tensors don't show: the caching allocator's reserve beyond the live tensors,
the CUDA context and library workspaces, and NCCL's communication buffers.

device total = allocated peak (tensors) + allocator slack (reserved - allocated) + context + NCCL

- Allocator slack: PyTorch's caching allocator keeps freed blocks reserved and cannot always reuse
  them for differently sized requests (large requests are rounded up to 2 MiB multiples and served
  from segments that are split, not merged across segments; blocks freed on one stream are not reused
  by another until the other stream's work on them is done, which the collectives of a multi-GPU run
  make worse: FSDP's all-gather / reduce-scatter buffers and Megatron's all-reduces run on NCCL streams).
  Model: a fraction of the allocated peak, each a least-squares fit (relative error of
  max_memory_reserved) on measured training-step peaks, allocated next to reserved:
  * more than one rank, any stack (SLACK_MULTI_GPU): 7 rows from 3 public sources (llama-cookbook PRs
    #41/#165/#650: Llama-7B FSDP; Liger-Kernel PR #110: Llama-3-8B HF Trainer + FSDP; Megatron-LM issue
    #60: GPT-2 2.6B mp=2 dp=8), measured 26-80%;
  * one GPU, an eager PyTorch loop (stack pytorch, SLACK_ONE_GPU): 34 rows from 2 sources (peft issue
    #1469: the author's own loop, BERT-size models, 6 rows; gpuwise's own H200 grid,
    gpuwise/data/measured/gpu/gpu_runs.csv, 28 rows, in-sample for this fraction), measured 0.5-65%
    (0.5-29% on the H200 grid, largest with full recompute and an unchunked loss over a large vocabulary);
  * one GPU under another stack (SLACK_UNMEASURED): no measured row; the single fraction fitted on all 13
    public rows (what the model used for every run before the split), kept until one is measured.
  Public rows: gpuwise/data/measured/allocator_reserved_vs_allocated.csv (column multi_gpu). The single
  fraction had a leave-one-source-out median error of reserved of 16% on the public rows and
  over-predicted the H200 grid's reserved peak by 14% (median); split by the number of ranks the
  leave-one-source-out median is 8% on the public rows and 5% on the H200 grid (fitted on peft's rows
  alone); see `gpuwise.validation.memory.calibrate_overhead` (a test holds the constants to it). The
  allocated peak is the regressor because it is what the rows state (their activation / state split
  is not). The two HF BERT-large nvidia-smi totals are
  out-of-sample validation rows. With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow
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
# reserved - allocated at the peak, as a fraction of the allocated peak (see the module docstring for the rows
# each is fitted on); calibrate_overhead() recomputes them.
SLACK_ONE_GPU = 0.101        # one GPU, stack pytorch
SLACK_MULTI_GPU = 0.380      # more than one rank, any stack
SLACK_UNMEASURED = 0.235     # one GPU, another stack: the single fraction of the 13 public rows
CALIBRATION_ROWS = {"one GPU": 34, "several GPUs": 7, "unsplit": 13}
CALIBRATION_SOURCES = {"one GPU": 2, "several GPUs": 3, "unsplit": 4}
MEASURED_ONE_GPU_STACKS = ("pytorch",)   # the stacks of the one-GPU fit rows
NCCL_BUFFSIZE_MIB = 4
NCCL_CHANNELS = 16


def slack_fraction(multi_gpu: bool, stack: str = "pytorch") -> float:
    """reserved - allocated at the peak as a fraction of the allocated peak (see the module docstring)."""
    if multi_gpu:
        return SLACK_MULTI_GPU
    return SLACK_ONE_GPU if stack in MEASURED_ONE_GPU_STACKS else SLACK_UNMEASURED


def allocator_slack_bytes(allocated: float, multi_gpu: bool, stack: str = "pytorch") -> float:
    """reserved - allocated at the peak, for an `allocated` peak of live tensor bytes of a run on one GPU
    (`multi_gpu` False) or with more than one rank, under `stack`."""
    return slack_fraction(multi_gpu, stack) * allocated


def context_bytes(context: bool = True) -> float:
    return CONTEXT_MIB * MIB if context else 0.0


def nccl_bytes(group_sizes: tuple[int, ...]) -> float:
    """NCCL buffers for one communicator per parallel group with more than one rank."""
    comms = sum(1 for g in group_sizes if g > 1)
    return comms * NCCL_BUFFSIZE_MIB * MIB * 2 * NCCL_CHANNELS


def overhead_bytes(allocated: float, context: bool = True) -> float:
    """Context + allocator slack for an `allocated` peak (no NCCL): the single-GPU case."""
    return context_bytes(context) + allocator_slack_bytes(allocated, False)


def describe() -> str:
    return (f"overhead (not in tensors): CUDA context + cuBLAS workspaces {CONTEXT_MIB} MiB (lazy module loading; "
            f"PyTorch issues #107667/#109888), allocator slack (reserved - allocated) = {SLACK_ONE_GPU:.1%} of "
            f"the allocated peak on one GPU in an eager PyTorch loop ({CALIBRATION_ROWS['one GPU']} measured "
            f"peaks from {CALIBRATION_SOURCES['one GPU']} sources, peft's and gpuwise's H200 runs), "
            f"{SLACK_MULTI_GPU:.1%} with more than one rank ({CALIBRATION_ROWS['several GPUs']} peaks from "
            f"{CALIBRATION_SOURCES['several GPUs']} public sources), {SLACK_UNMEASURED:.1%} on one GPU under "
            f"another stack (not measured: the single fit on {CALIBRATION_ROWS['unsplit']} public peaks); "
            "least-squares fits, leave-one-source-out median error of reserved 8% on the public rows, 5% on "
            "the H200 runs), "
            f"NCCL {NCCL_BUFFSIZE_MIB} MiB x 2 neighbours x {NCCL_CHANNELS} channels per "
            "communicator (NCCL_BUFFSIZE default; channel count assumed, not calibrated); "
            "expandable_segments off; `memory --method trace` on one GPU simulates the allocator instead "
            "(docs/allocator.md)")
