"""Training configuration: precision, optimizer, batch and the parallel plan.

Shared by the memory estimator, the step-time model, the planner and the schedulers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuwise.workload.stacks import stack_names

# fp8: Transformer Engine style FP8 training: bf16 parameters with fp32 master weights (as bf16-mixed), FP8 GEMMs
# with fp8 copies of the weights (and their transposes) cached, and the GEMM inputs saved for backward in fp8
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16", "fp8")
# adamw8bit / paged_adamw8bit: bitsandbytes' names (adamw-8bit is the older gpuwise spelling of adamw8bit);
# paged: the state lives in CUDA unified memory, outside PyTorch's allocator, paged to host under pressure
OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor", "adamw-8bit", "adamw8bit", "paged_adamw8bit")
# Cross-entropy kernels at the loss boundary: eager | eager-nocast | chunked | fused | fused-linear | megatron | cce
# (what each keeps: gpuwise.estimate.activations.LOSS_BYTES). --chunked-loss = chunked.
LOSS_KERNELS = ("eager", "eager-nocast", "chunked", "fused", "fused-linear", "megatron", "cce")
# precisions whose autocast runs cross_entropy in float32 whatever the logits' dtype (eager-nocast is eager there)
AUTOCAST_PRECISIONS = ("bf16-mixed", "fp16-mixed", "fp8")
# optimizer step implementations: fused kernel (no step-wide temporaries), foreach (multi-tensor; PyTorch's
# default on CUDA when neither is asked: one fp32 temporary per parameter for sqrt(v)), per-param loop
OPTIMIZER_IMPLS = ("fused", "foreach", "per-param")
LOSS_CHUNKS = 8          # torchtune's num_output_chunks default; the fused kernels' chunking stated the same
# LoRA target modules: canonical names (q, k, v, o attention projections; gate, up, down MLP; head = the output
# layer) or all-linear (every linear layer of every block, not the head: PEFT's all-linear).
# Default q,v = PEFT's default for Llama-style models (fused QKV matrix for gpt2/bloom/falcon/gpt_neox/mpt).
LORA_MODULES = ("q", "k", "v", "o", "gate", "up", "down", "head")
LORA_DEFAULT = "q,v"
RECOMPUTE = ("none", "selective", "full")
# Every recompute policy by name, as the frameworks define them (see `recompute_policy`):
#   none       keep every activation
#   selective  Megatron-core's attention-core recompute (softmax/scores recomputed in backward)
#   op         torchtitan's op-level selective AC: matmul outputs saved except every second one
#   layer-K    torchtitan's layer-level selective AC: full checkpointing of every K-th block
#   full       torch.utils.checkpoint around every block (only each block's input is kept)
RECOMPUTE_POLICIES = ("none", "selective", "op", "layer-K", "full")
# Software stacks (gpuwise/data/stacks/stacks.csv, gpuwise.workload.stacks): pytorch (eager PyTorch, the default),
# torchtitan, megatron, deepspeed, hf-trainer, llm-foundry, torchtune, litgpt. Each row holds the stack's
# defaults (loss kernel, precision, gradient buffer, optimizer implementation, norms, attention) and the
# fitted kernel efficiencies it is timed with (calibration/op_efficiency.csv: pytorch and megatron are fitted).
STACKS = stack_names()
# Pipeline schedules (torch.distributed.pipelining names): 1f1b (default), gpipe (all forwards first),
# interleaved-V (interleaved 1F1B, V model chunks per stage), zb (zero-bubble ZB-H1: 1F1B's memory)
PP_SCHEDULES = ("1f1b", "gpipe", "interleaved-V", "zb")


@dataclass(frozen=True)
class RecomputePolicy:
    """A parsed recompute name: `kind` in none/selective/op/layer/full; `every` for layer-K."""

    kind: str
    every: int = 1

    def checkpointed(self, layer_index: int) -> bool:
        """True if block `layer_index` (0-based) is wholly checkpointed (full, or every K-th)."""
        if self.kind == "full":
            return True
        return self.kind == "layer" and (layer_index + 1) % self.every == 0


def recompute_policy(name: str) -> RecomputePolicy:
    """Parse a recompute name (RECOMPUTE_POLICIES); InputError naming the choices otherwise."""
    if isinstance(name, str):
        return _parse_recompute(name)
    return _parse_recompute.__wrapped__(name)     # unhashable input: parsed (and refused) uncached


@lru_cache(maxsize=64)   # parsed once per name: the planner asks ~10^5 times per plan
def _parse_recompute(name: str) -> RecomputePolicy:
    from gpuwise.errors import InputError

    if name in ("none", "selective", "op", "full"):
        return RecomputePolicy(name)
    if isinstance(name, str) and name.startswith("layer-") and name[6:].isdigit() and int(name[6:]) >= 1:
        return RecomputePolicy("layer", int(name[6:]))
    raise InputError("recompute", name, "use one of " + ", ".join(RECOMPUTE_POLICIES) + " (K a positive integer, "
                     "e.g. layer-2)")


@dataclass(frozen=True)
class ParallelPlan:
    """How one training job is laid out on its GPUs (gpus = dp * tp * pp * cp)."""

    dp: int = 1                 # data-parallel replicas
    tp: int = 1                 # tensor parallel
    pp: int = 1                 # pipeline stages
    cp: int = 1                 # context parallel
    sp: bool = False            # sequence parallel (with tp)
    zero: int = 0               # ZeRO stage 0-3 over the dp x cp group (FSDP full shard = 3)
    pp_schedule: str = "1f1b"   # pipeline schedule (PP_SCHEDULES), used when pp > 1
    # hybrid ZeRO-1 shard group (InternEvo `zero1` size): 0 = off (ZeRO over all dp x cp ranks, as above);
    # k > 0 (with zero=1, k divides dp x cp) = optimizer states sharded over groups of k ranks, gradients all-reduced
    # over all dp x cp ranks, updated parameters all-gathered within the k-rank group after the optimizer step
    zero_shard: int = 0

    @property
    def state_shards(self) -> int:
        """Ranks that split the optimizer states under ZeRO >= 1 (the hybrid group, else all dp x cp ranks)."""
        return self.zero_shard or self.dp * self.cp

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def fsdp_ways(self) -> int:
        """Ranks the parameters are sharded over under ZeRO-3 / FSDP (dp x cp), 1 otherwise."""
        return self.dp * self.cp if self.zero >= 3 else 1

    def label(self) -> str:
        parts = [f"dp{self.dp}"]
        if self.tp > 1:
            parts.append(f"tp{self.tp}" + ("+sp" if self.sp else ""))
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.zero:
            parts.append(f"zero{self.zero}" + (f"/{self.zero_shard}" if self.zero_shard else ""))
        return "-".join(parts)


@dataclass(frozen=True)
class TrainingConfig:
    """Per-step training settings. `micro_batch` is per GPU (per dp replica) per micro-step."""

    micro_batch: int = 1
    seq_len: int = 2048
    grad_accum: int = 1
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    recompute: str = "none"
    flash_attention: bool = True
    lora_rank: int = 0              # 0 = full fine-tuning
    quantize: str | None = None     # frozen base: "nf4" (QLoRA), "gptq-int4" / "gptq-int8" (estimate.gptq)
    offload_optimizer: bool = False # optimizer states (and master weights) in host memory
    plan: ParallelPlan = ParallelPlan()
    stack: str = "pytorch"          # software stack whose measured kernel efficiencies time the step (STACKS)
    # levers (gpuwise/estimate/levers.py; None = the stack's default, gpuwise/data/stacks.csv)
    cpu_offload: bool = False       # FSDP CPUOffloadPolicy: sharded params, grads and optimizer state on the host
    loss_kernel: str | None = None  # LOSS_KERNELS
    optimizer_impl: str | None = None     # OPTIMIZER_IMPLS (None = the stack's)
    optimizer_in_backward: bool = False   # each parameter stepped in its gradient hook (no full gradient set)
    activation_offload: bool = False      # saved activations moved to host memory during forward
    lora_targets: str = LORA_DEFAULT      # LORA_MODULES, comma-separated, or all-linear; q,v is the pytorch stack's:
    #                                       the CLI and job specs fill in the named stack's (stacks.csv lora_targets)
    lora_dropout: float | None = None     # LoRA dropout probability (> 0: each adapted linear keeps its dropout mask and
    #                                       its own input copy); None = the stack's recipes' (stacks.csv lora_dropout)
    compile: bool = False           # torch.compile (inductor) of each block
    float8: bool = False            # torchao Float8 training: FP8 GEMMs and FP8 all-gather of FSDP parameters
    async_tp: bool = False          # asynchronous tensor parallelism: TP collectives overlapped with the GEMMs
    dora: bool = False              # DoRA (weight-decomposed LoRA, PEFT use_dora / torchtune DoRALinear): a trainable
    #                                 magnitude per output row, the weight's row norms recomputed every forward
    padding_mask: bool = False      # batches carry a padding attention mask that reaches SDPA as a 4D additive mask
    #                                 (Hugging Face models under attn_implementation="sdpa" given an attention_mask with
    #                                 zeros): PyTorch's memory-efficient kernel computes every key tile (no causal skip)
    #                                 and reads the b x s x s mask per head; the mask is kept through the step

    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.plan.dp

    @property
    def frozen_base(self) -> bool:
        """LoRA or a 4-bit base (QLoRA): the base weights are frozen, only adapters train (no weight gradients)."""
        return self.lora_rank > 0 or self.quantize is not None


_CONFIG_FIELDS = frozenset(TrainingConfig.__dataclass_fields__)


def with_changes(cfg: TrainingConfig, **changes) -> TrainingConfig:
    """``dataclasses.replace(cfg, **changes)`` for the layout search's inner loops (~10x faster; a plan builds
    ~10^4 configurations): TrainingConfig's generated __init__ only sets its fields (no __post_init__,
    tests/test_plan_candidates.py checks both), so copying them gives an equal object."""
    if not changes.keys() <= _CONFIG_FIELDS:
        raise TypeError(f"not TrainingConfig fields: {sorted(changes.keys() - _CONFIG_FIELDS)}")
    new = object.__new__(TrainingConfig)
    fields = new.__dict__
    fields.update(cfg.__dict__)
    fields.update(changes)
    return new
