"""Per-GPU memory that tensors don't show: the caching allocator's reserve beyond the live tensors,
the CUDA context and library workspaces, and NCCL's communication buffers.

device total = allocated peak (tensors) + allocator slack (reserved - allocated) + context + NCCL

- Allocator slack: PyTorch's caching allocator keeps freed blocks reserved and cannot always reuse
  them for differently sized requests (large requests are rounded up to 2 MiB multiples and served
  from segments that are split, not merged across segments; a block allocated on one stream serves only
  that stream's later requests, and blocks freed while another stream still uses them wait for it, which the
  collectives of a multi-GPU run and DeepSpeed's side streams make worse: FSDP's all-gather / reduce-scatter
  buffers and Megatron's all-reduces run on NCCL streams).
  Model: per group of runs (`slack_group`), a fraction of the allocated peak plus a fixed amount per GPU
  (segments the allocator keeps from loading and from one-off requests, whatever the model's size: the
  small models of the one-GPU rows keep 0.2-1.2 GiB over 0.3-2.5 GiB allocated), both fitted by non-negative
  least squares (relative error of max_memory_reserved) on measured training-step peaks with memory to spare,
  allocated next to reserved, in gpuwise/data/measured/allocator_reserved_vs_allocated.csv and gpuwise's own
  H200 grid. Leave-one-source-out, the fixed term took the H200 grid's median error from 11.6% (a fraction
  alone, fitted on the other sources' small models) to 4.0%, and the public rows' from 5.9% to 7.9%:
  * one GPU, a plain training loop, whatever the stack (SLACK["one GPU"]): peft issue #1469 (hand-written loops,
    BERT/ESM-size models), torchtune PR #527 (its single-device recipe) and the H200 grid
    (gpuwise/data/measured/gpu/gpu_runs.csv, in-sample for this fraction), measured 0.5-169% (0.5-29% on the
    H200 grid, largest with full recompute and an unchunked loss over a large vocabulary; the largest
    fractions are small models);
  * one GPU under DeepSpeed (SLACK["one GPU, DeepSpeed"]): ZeRO-2/3 engine, bucketed gradient buffers and side
    streams with one rank; gpjt/fine-tune-2024-04 (HF Trainer + DeepSpeed, 4 rows) and min-max-gpt PR #5
    (1 row), measured 20-42%;
  * more than one rank, any stack (SLACK["several GPUs"]): llama-cookbook PRs #41/#165/#650 (FSDP1 and a per-parameter
    prototype), Liger-Kernel PR #110 (HF Trainer + FSDP), Megatron-LM issue #60, torchtitan PR #165 (FSDP1 and
    FSDP2), ISEEKYAN/Megatron-LM #150 (FSDP2 and Megatron-FSDP), NeMo #14850 (Megatron TP/PP/EP), measured
    7-80%.
  Which rows fit each group and the leave-one-source-out errors: `gpuwise.validation.memory.calibrate_overhead`
  (a test holds the constants to it) and `gpuwise validate memory`. Until 2026-11-26 a one-GPU run under a
  stack other than a hand-written loop used the single fraction of all public rows (23.5%, multi-GPU rows
  included) because no row measured one; the torchtune row and the DeepSpeed rows replaced it. The allocated
  peak is the regressor because it is what the rows state (their activation / state split is not). With
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow in place and most of this slack disappears
  (PyTorch CUDA semantics notes); the default (off) is assumed.
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

from typing import NamedTuple

from gpuwise.hardware.types import CUDA_CONTEXT_MIB

GIB = 2 ** 30
MIB = 2 ** 20

CONTEXT_MIB = CUDA_CONTEXT_MIB       # lazy-loaded CUDA context + cuBLAS workspaces (see docstring)
EAGER_CONTEXT_MIB = 1343            # HF model-memory-anatomy doc, first 1-element tensor


class Slack(NamedTuple):
    """reserved - allocated at the peak = fraction x allocated peak + gib GiB (per GPU)."""

    fraction: float
    gib: float


# per `slack_group` (see the module docstring for the rows each is fitted on); calibrate_overhead() recomputes them
SLACK = {"one GPU": Slack(0.085, 0.294),               # a plain training loop, any stack but deepspeed
         "one GPU, DeepSpeed": Slack(0.298, 0.0),
         "several GPUs": Slack(0.289, 0.060)}          # more than one rank, any stack
SLACK_GROUPS = tuple(SLACK)
CALIBRATION_ROWS = {"one GPU": 40, "one GPU, DeepSpeed": 5, "several GPUs": 16}
CALIBRATION_SOURCES = {"one GPU": 3, "one GPU, DeepSpeed": 2, "several GPUs": 6}
LOSO_MEDIAN = {"public": 0.079, "grid": 0.040}   # leave-one-source-out median |error| of reserved (a test checks)
NCCL_BUFFSIZE_MIB = 4
NCCL_CHANNELS = 16


def slack_group(multi_gpu: bool, stack: str = "pytorch") -> str:
    """The group of runs whose fitted slack applies: more than one rank (collectives on NCCL streams), one GPU
    under DeepSpeed (its engine's buffers and side streams), or one GPU in a plain training loop."""
    if multi_gpu:
        return "several GPUs"
    return "one GPU, DeepSpeed" if stack == "deepspeed" else "one GPU"


def slack_terms(multi_gpu: bool, stack: str = "pytorch") -> Slack:
    """The fitted reserved - allocated of a run: its group's fraction of the allocated peak and fixed GiB."""
    return SLACK[slack_group(multi_gpu, stack)]


def allocator_slack_bytes(allocated: float, multi_gpu: bool, stack: str = "pytorch") -> float:
    """reserved - allocated at the peak, for an `allocated` peak of live tensor bytes of a run on one GPU
    (`multi_gpu` False) or with more than one rank, under `stack`."""
    s = slack_terms(multi_gpu, stack)
    return s.fraction * allocated + s.gib * GIB


def context_bytes(context: bool = True) -> float:
    return CONTEXT_MIB * MIB if context else 0.0


def nccl_bytes(group_sizes: tuple[int, ...]) -> float:
    """NCCL buffers for one communicator per parallel group with more than one rank."""
    comms = sum(1 for g in group_sizes if g > 1)
    return comms * NCCL_BUFFSIZE_MIB * MIB * 2 * NCCL_CHANNELS


def describe() -> str:
    one, ds, multi = (SLACK[g] for g in SLACK_GROUPS)
    return (f"overhead (not in tensors): CUDA context + cuBLAS workspaces {CONTEXT_MIB} MiB (lazy module loading; "
            f"PyTorch issues #107667/#109888), allocator slack (reserved - allocated) = {one.fraction:.1%} of "
            f"the allocated peak + {one.gib:.2f} GiB on one GPU in a plain training loop, any stack "
            f"({CALIBRATION_ROWS['one GPU']} measured peaks from {CALIBRATION_SOURCES['one GPU']} sources: peft's "
            f"and torchtune's threads, gpuwise's H200 runs), {ds.fraction:.1%} + {ds.gib:.2f} GiB on one GPU "
            f"under DeepSpeed ({CALIBRATION_ROWS['one GPU, DeepSpeed']} peaks from "
            f"{CALIBRATION_SOURCES['one GPU, DeepSpeed']} sources), {multi.fraction:.1%} + {multi.gib:.2f} GiB with more "
            "than one rank "
            f"({CALIBRATION_ROWS['several GPUs']} peaks from {CALIBRATION_SOURCES['several GPUs']} public sources, "
            "FSDP1/FSDP2/Megatron); non-negative least squares, leave-one-source-out median error of "
            f"reserved {LOSO_MEDIAN['public']:.1%} on the public rows, {LOSO_MEDIAN['grid']:.1%} on the H200 runs "
            "(gpuwise validate memory); measured on steps of one length: where lengths vary per batch (padding to "
            "each batch's longest) the reserve ratchets up beyond it (ms-swift's variable-length run read up to 2x "
            "this estimate's reserved peak), which `memory --method trace --lengths` simulates (not validated); "
            f"NCCL {NCCL_BUFFSIZE_MIB} MiB x 2 neighbours x {NCCL_CHANNELS} channels per "
            "communicator (NCCL_BUFFSIZE default; channel count assumed, not calibrated); "
            "expandable_segments off; `memory --method trace` on one GPU simulates the allocator instead "
            "(docs/allocator.md)")
