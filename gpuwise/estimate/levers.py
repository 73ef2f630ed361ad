"""The levers users pull to fit a model on their cards, resolved against the stack's defaults: what each
one changes in the per-GPU memory (memory.py applies it), what it costs in step time (`offload_seconds`)
and the assumption line that states it.

- cpu_offload (FSDP2 CPUOffloadPolicy / FSDP1 CPUOffload(offload_params=True)): sharded parameters,
  gradients and optimizer state live in pinned host memory and the optimizer steps on the CPU. The GPU
  holds only the unsharded working set: the gathered block (and the prefetched one), the root group,
  one block's unsharded gradient and its reduce-scatter input, and the activations. Each micro-step
  copies the local parameter shard to the GPU for the forward and backward all-gathers and the reduced
  gradient shard back; the CPU runs the Adam update.
- loss_kernel (chunked / fused / fused-linear): activations.LOSS_BYTES.
- optimizer_in_backward (torchtune optimizer_in_bwd, PyTorch register_post_accumulate_grad_hook): each
  parameter is stepped and its gradient freed as soon as it is accumulated, so no full gradient set is
  alive (one block's gradients at a time); gradient accumulation is impossible with it.
- activation_offload (torchtune OffloadActivations, saved-tensor hooks): saved activations are copied to
  host memory on a side stream during forward and back during backward; the GPU keeps the blocks in
  transit (ACT_OFFLOAD_RESIDENT blocks' worth), the embedding and the loss tensors.
- checkpoints offloaded (stacks.csv checkpoints host: Unsloth's use_gradient_checkpointing="unsloth"): under
  recompute full the stack copies each block's checkpointed input to the host; the saved activations are then
  those inputs, so it is activation offload of them (same GPU residency and copy time). layer-1 checkpoints
  every block too but keeps the inputs on the GPU (Unsloth's use_gradient_checkpointing=True).
- one-GPU stacks (stacks.csv gpus one: Unsloth): a layout on more GPUs is blocked.
- lora_targets: lora.py. 8-bit and paged optimizers: model_states.py; a paged optimizer's state is
  allocated in CUDA unified memory outside PyTorch's caching allocator and paged to the host under
  memory pressure, so it is neither in max_memory_allocated nor required to fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from gpuwise.errors import InputError
from gpuwise.hardware.types import GpuSpec
from gpuwise.estimate.gptq import GPTQ_PRECISIONS, gptq_format
from gpuwise.estimate.stack_code import model_code
from gpuwise.workload.stacks import stack_names, stack_row
from gpuwise.workload.training import (AUTOCAST_PRECISIONS, LOSS_CHUNKS, LOSS_KERNELS, OPTIMIZER_IMPLS, TrainingConfig,
                                       recompute_policy)

ACT_OFFLOAD_RESIDENT = 2       # blocks of saved activations on the GPU: the one computing and the one in transit
PAGED = ("paged_adamw8bit",)
# Host <-> GPU copy bandwidth per GPU (GB/s, one direction, pinned memory), by PCIe generation of the
# architecture: ~80% of x16 link rate (Gen3 16, Gen4 32, Gen5 64 GB/s). An assumption, not calibrated.
HOST_LINK_GBPS = {"Volta": 12.0, "Turing": 12.0, "Ampere": 25.0, "Ada": 25.0, "Hopper": 50.0, "Blackwell": 50.0}
HOST_LINK_DEFAULT_GBPS = 25.0
# CPU AdamW update (torch.optim.AdamW on the host, fp32 states): parameters per second per GPU's share of
# the host. An assumption (a few GB/s of host-memory traffic at 16 B read + 12 B written per parameter).
CPU_ADAM_PARAMS_PER_S = 2.5e8


@dataclass(frozen=True)
class Levers:
    """The levers of a TrainingConfig with the stack's defaults filled in."""

    loss_kernel: str
    fp32_main_grad: bool
    optimizer_impl: str
    low_norms: bool
    paged: bool
    offload_checkpoints: bool = False   # the stack copies checkpointed block inputs to the host (stacks.csv checkpoints)


def resolve(cfg: TrainingConfig) -> Levers:
    return _resolve(cfg.stack, cfg.loss_kernel, cfg.optimizer, cfg.optimizer_impl, cfg.micro_batch * cfg.seq_len,
                    cfg.recompute, cfg.precision)


@lru_cache(maxsize=256)      # memory estimates ask once per stage load (the planner: ~10^4 times per plan)
def _resolve(stack: str, loss_kernel: str | None, optimizer: str, optimizer_impl: str | None = None,
             tokens: int = 0, recompute: str = "none", precision: str = "") -> Levers:
    st = stack_row(stack)
    kernel = loss_kernel or st.loss_kernel_for(tokens)
    if kernel == "eager-nocast" and precision in AUTOCAST_PRECISIONS:   # a stack's own-dtype loss under autocast:
        kernel = "eager"                                                 # cross_entropy runs in float32 there
    return Levers(kernel, st.grads == "fp32-main-grad",
                  optimizer_impl or st.optimizer_impl, st.norms == "low", optimizer in PAGED,
                  st.checkpoints == "host" and recompute_policy(recompute).kind == "full")


def lora_dropout(cfg: TrainingConfig) -> float:
    """The run's LoRA dropout probability: --lora-dropout, or the stack's recipes' (stacks.csv lora_dropout); 0
    without adapters."""
    if cfg.lora_rank <= 0:
        return 0.0
    return stack_row(cfg.stack).lora_dropout if cfg.lora_dropout is None else float(cfg.lora_dropout)


def reference_lora_dropout(cfg: TrainingConfig) -> float:
    """The LoRA dropout gpuwise's reference layers run (the trace's, and the adapters' traffic in the step time): the
    run's, except under a stack whose own LoRA layers have their own dropout rules (stack_code lora_dropout: LitGPT's
    fused QKV adapter), which the reference layers do not run."""
    return 0.0 if model_code(cfg.stack).lora_dropout else lora_dropout(cfg)


def activation_offload(cfg: TrainingConfig) -> bool:
    """Saved activations leave the GPU: --activation-offload, or a stack that offloads its checkpoints (under a
    checkpointing policy the checkpointed inputs are what a block saves)."""
    return cfg.activation_offload or resolve(cfg).offload_checkpoints


def _stacks_where(has) -> str:
    """The stacks whose stacks.csv row satisfies `has`, for a refusal's fix."""
    return ", ".join(s for s in stack_names() if has(stack_row(s)))


def check_levers(cfg: TrainingConfig, transformer: bool) -> None:
    """InputError (field, value, fix) for lever settings that no layout can run."""
    if cfg.loss_kernel is not None and cfg.loss_kernel not in LOSS_KERNELS:
        raise InputError("loss-kernel", cfg.loss_kernel, "use one of " + ", ".join(LOSS_KERNELS))
    if cfg.loss_kernel == "eager-nocast" and cfg.precision in AUTOCAST_PRECISIONS:
        raise InputError("loss-kernel", cfg.loss_kernel, f"under autocast (precision {cfg.precision}) cross_entropy "
                         "runs in float32 whatever the logits' dtype: use --loss-kernel eager, or a pure precision "
                         "(bf16, fp32)")
    if cfg.optimizer_impl is not None and cfg.optimizer_impl not in OPTIMIZER_IMPLS:
        raise InputError("optimizer-impl", cfg.optimizer_impl, "use one of " + ", ".join(OPTIMIZER_IMPLS))
    if cfg.lora_rank > 0:
        from gpuwise.estimate.lora import lora_modules

        lora_modules(cfg.lora_targets)
    if cfg.lora_dropout is not None and not (isinstance(cfg.lora_dropout, (int, float)) and 0 <= cfg.lora_dropout < 1):
        raise InputError("lora-dropout", cfg.lora_dropout, "use a probability in [0, 1), e.g. 0.05")
    if cfg.lora_dropout and cfg.lora_rank <= 0:
        raise InputError("lora-dropout", cfg.lora_dropout, "applies to LoRA adapters: add --lora-rank R, or drop it "
                         "for a full fine-tune")
    if cfg.cpu_offload and cfg.offload_optimizer:
        raise InputError("offload-optimizer", True, "--cpu-offload already keeps the optimizer state on the host; "
                         "drop --offload-optimizer")
    if (cfg.cpu_offload or cfg.optimizer_in_backward or cfg.activation_offload) and not transformer:
        raise InputError("cpu-offload/optimizer-in-backward/activation-offload", True,
                         "modelled for transformers only; drop the flag for explicit models")
    if cfg.padding_mask and not transformer:
        raise InputError("padding-mask", True, "an attention mask applies to transformers only; drop the flag")
    if cfg.padding_mask and not stack_row(cfg.stack).hf_models:
        raise InputError("padding-mask", True, f"models Hugging Face transformers' sdpa padding mask; the {cfg.stack} "
                         "stack runs its own model code: drop the flag, or name a stack that runs Hugging Face models "
                         "(" + _stacks_where(lambda r: r.hf_models) + ")")
    if gptq_format(cfg.quantize) is not None:
        _check_gptq(cfg)
    if cfg.dora:
        _check_dora(cfg, transformer)
    if cfg.optimizer_impl is not None and not transformer:
        raise InputError("optimizer-impl", cfg.optimizer_impl, "modelled for transformers only (an explicit model's "
                         "optimizer step is a fixed bytes-per-parameter pass); drop the flag")


def _check_gptq(cfg: TrainingConfig) -> None:
    """A GPTQ base is what Hugging Face + PEFT load through AutoGPTQ, whose matmul runs in fp16 (gptq.py)."""
    if not stack_row(cfg.stack).hf_models:
        raise InputError("quantize", cfg.quantize, f"a GPTQ base loads through transformers and AutoGPTQ; the "
                         f"{cfg.stack} stack runs its own model code: use --quantize nf4, or name a stack that runs "
                         "Hugging Face models (" + _stacks_where(lambda r: r.hf_models) + ")")
    if cfg.precision not in GPTQ_PRECISIONS:
        raise InputError("precision", cfg.precision, "a GPTQ base dequantises to fp16 for its matmul: use "
                         + ", ".join(GPTQ_PRECISIONS))


def _check_dora(cfg: TrainingConfig, transformer: bool) -> None:
    """DoRA is a LoRA variant of PEFT's and torchtune's layers (stacks.csv dora)."""
    if cfg.lora_rank <= 0 or not transformer:
        raise InputError("dora", True, "DoRA decomposes LoRA adapters on a transformer: add --lora-rank R, or drop "
                         "--dora")
    if stack_row(cfg.stack).dora == "no":
        raise InputError("dora", True, f"the {cfg.stack} stack has no DoRA layer: drop --dora, or name a stack that "
                         "has one (" + _stacks_where(lambda r: r.dora != "no") + ")")
    if gptq_format(cfg.quantize) is not None:
        raise InputError("dora", True, "DoRA over a GPTQ base is not modelled: use --quantize nf4 or a 16-bit base")
    from gpuwise.estimate.lora import lora_modules

    if "head" in lora_modules(cfg.lora_targets):
        raise InputError("dora", True, "DoRA on the output layer (lora target head) is not modelled: drop head from "
                         "the LoRA targets")


def blocked(cfg: TrainingConfig) -> tuple[str, object, str] | None:
    """(field, value, fix) when this layout cannot run the levers, else None. Searches over layouts treat
    such a configuration as not fitting (memory.py); a layout the user gave is refused (`refuse_blocked`)."""
    p = cfg.plan
    if why := stack_gpus_refusal(cfg.stack, p.gpus):
        return why
    if cfg.cpu_offload and (p.zero != 3 or resolve(cfg).fp32_main_grad):
        return ("cpu-offload", True, "FSDP CPU offload shards with FSDP: add --zero 3 (on any number of GPUs); "
                "for optimizer state alone use --offload-optimizer")
    if gptq_format(cfg.quantize) is not None and (p.tp > 1 or p.pp > 1 or p.cp > 1 or p.zero >= 3):
        return ("quantize", cfg.quantize, "a GPTQ base is modelled unsharded: its packed int32 buffers are not split "
                "by TP/PP/CP or sharded by FSDP in gpuwise's model: use data parallelism with ZeRO 0-2")
    if cfg.dora and stack_row(cfg.stack).dora == "peft" and p.zero > 0:
        return ("dora", True, "PEFT's DoRA layer is modelled on unsharded ranks (ZeRO 0), where its float32 adapters "
                "cast their input: use --zero 0, or torchtune's layers (--stack torchtune) under FSDP")
    if cfg.dora and (p.tp > 1 or p.cp > 1):
        return ("dora", True, "DoRA's weight norms are modelled on whole rows and sequences: use tp 1 and cp 1 "
                "(data parallelism, FSDP or pipeline stages)")
    if cfg.optimizer_in_backward and (cfg.grad_accum > 1 or p.pp > 1):
        return ("optimizer-in-backward", True, "steps each parameter in its gradient hook, so gradients cannot "
                "accumulate over micro-batches: use --grad-accum 1 and no pipeline (pp 1)")
    return None


def offload_grads_held(stack: str, cpu_offload: bool, in_bwd: bool, pp: int) -> bool:
    """FSDP CPU offload under a stack whose FSDP1 keeps each unit's reduced gradient shard on the GPU until the
    backward ends (stack_code offload_grads_held), where it does: not with the optimizer in backward (FSDP1 runs
    prepare_gradient_for_optim per unit, dropping the shard at once), nor under pipeline parallelism (modelled as
    FSDP2). The one test memory.py and the assumption line share."""
    return cpu_offload and not in_bwd and pp == 1 and model_code(stack).offload_grads_held


def stack_gpus_refusal(stack: str, gpus: int) -> tuple[str, object, str] | None:
    """(field, value, fix) when a one-GPU stack (stacks.csv gpus) is asked to run on several GPUs."""
    if gpus > 1 and stack_row(stack).gpus == "one":
        return ("stack", stack, f"{stack} trains on one GPU only (stacks.csv gpus): use one GPU (dp, tp, pp and cp 1) "
                "or another stack")
    return None


def refuse_blocked(cfg: TrainingConfig) -> None:
    why = blocked(cfg)
    if why:
        raise InputError(*why)


def lever_notes(cfg: TrainingConfig, trainable: float) -> list[str]:
    """One assumption line per lever in effect (stack defaults say so)."""
    p = cfg.plan
    return list(_lever_notes(cfg.stack, cfg.loss_kernel, cfg.optimizer, cfg.cpu_offload, cfg.optimizer_in_backward,
                             cfg.activation_offload, p.dp * p.cp, trainable, cfg.optimizer_impl,
                             cfg.micro_batch * cfg.seq_len, cfg.recompute, cfg.precision, p.pp))


@lru_cache(maxsize=1024)   # the same lines for every micro-batch and accumulation of a search
def _lever_notes(stack: str, loss_kernel: str | None, optimizer: str, cpu_offload: bool, in_bwd: bool,
                 act_offload: bool, shards: int, trainable: float, optimizer_impl: str | None = None,
                 tokens: int = 0, recompute: str = "none", precision: str = "bf16-mixed",
                 pp: int = 1) -> tuple[str, ...]:
    cfg = TrainingConfig(stack=stack, loss_kernel=loss_kernel, optimizer=optimizer, cpu_offload=cpu_offload,
                         optimizer_in_backward=in_bwd, activation_offload=act_offload, optimizer_impl=optimizer_impl,
                         seq_len=tokens, recompute=recompute, precision=precision)
    lev = resolve(cfg)
    st = stack_row(stack)
    from_stack = "" if cfg.loss_kernel else (
        f" ({stack} default)" if lev.loss_kernel == st.loss_kernel else
        f" ({stack} default {st.loss_kernel}; autocast runs cross_entropy in float32)" if not st.short_loss_kernel else
        f" ({stack} default for micro-batches of at most {st.short_loss_tokens} tokens)")
    out = [f"loss kernel {lev.loss_kernel}{from_stack}" + _LOSS_TEXT[lev.loss_kernel]]
    if lev.offload_checkpoints and not act_offload:
        out.append(f"checkpoints offloaded ({stack} default, stacks.csv checkpoints host): each checkpointed block's "
                   f"input is copied to host memory in forward and back for its backward; {ACT_OFFLOAD_RESIDENT} "
                   "blocks' inputs, the embedding and the loss tensors stay on the GPU")
    elif st.checkpoints == "host" and not act_offload:
        out.append(f"checkpoints not offloaded: {stack} offloads each block's checkpointed input under recompute full "
                   f"(stacks.csv checkpoints host); recompute {recompute} keeps its checkpoints, if any, on the GPU")
    if cfg.cpu_offload:
        host = trainable * 16 / shards
        out.append("FSDP CPU offload: sharded parameters, gradients and optimizer state in pinned host memory "
                   f"(~{host / 2 ** 30:.1f} GiB of host memory per GPU at 4 + 4 + 8 B per parameter), the optimizer "
                   "step on the CPU; the GPU keeps the gathered blocks, the root group, "
                   + ("every block's reduced gradient shard until the backward ends (FSDP1)"
                      if offload_grads_held(stack, cpu_offload, in_bwd, pp) else "one block's gradient")
                   + " and the activations")
    if cfg.optimizer_in_backward:
        out.append("optimizer in backward: each parameter is stepped in its gradient hook and its gradient freed, "
                   "so one block's gradients are alive at a time (no gradient accumulation)")
    if cfg.activation_offload:
        out.append(f"activation offload: saved activations copied to host memory during forward and back during "
                   f"backward on a side stream; {ACT_OFFLOAD_RESIDENT} blocks' activations, the embedding and the "
                   "loss tensors stay on the GPU")
    if lev.paged:
        out.append(f"{cfg.optimizer}: optimizer state in CUDA unified memory outside PyTorch's allocator (paged to "
                   "host under memory pressure): not in the allocated peak and not required to fit; nvidia-smi "
                   "shows it while resident")
    if lev.optimizer_impl in ("foreach", "per-param") and cfg.optimizer not in ("adam", "adamw"):
        if cfg.optimizer_impl:
            out.append(f"optimizer implementation {lev.optimizer_impl} (--optimizer-impl): {cfg.optimizer} is "
                       "modelled with no step-wide temporary and the same update traffic as its default")
    elif lev.optimizer_impl in _UNFUSED_TEMPS:
        why = "--optimizer-impl" if cfg.optimizer_impl else f"{cfg.stack} default"
        out.append(f"optimizer implementation {lev.optimizer_impl} ({why}): {_UNFUSED_TEMPS[lev.optimizer_impl]}"
                   + _UNFUSED_STEP_TEXT)
    elif cfg.optimizer_impl:     # fused, asked for over a stack default that is not
        out.append("optimizer implementation fused (--optimizer-impl): one kernel per step, no step-wide "
                   "temporaries")
    return tuple(out)


# what an unfused AdamW step keeps alive at once (memory.py _optimizer_temp)
_UNFUSED_TEMPS = {"foreach": "the multi-tensor step allocates one fp32 temporary per parameter for sqrt(v)",
                  "per-param": "one tensor's temporaries at a time"}
# roofline_step.UNFUSED_ADAM_EXTRA_BYTES (counted from torch.optim.adam's foreach / single-tensor update)
_UNFUSED_STEP_TEXT = ("; an unfused (Adam)W update is 8 elementwise passes over fp32 tensors, timed as 80 bytes per "
                      "parameter read + written (Adam: 72) against the fused kernel's 28")


_LOSS_TEXT = {
    "eager": ": logits upcast to float32, cross-entropy keeps the float32 log-softmax; its backward adds two float32 "
             "vocabulary-wide gradients at the loss boundary (vocabulary-parallel under TP)",
    "eager-nocast": ": cross-entropy on the logits in their own dtype (no float32 upcast): the log-softmax kept, two "
                    "vocabulary-wide gradients at the loss boundary, all in the logits' dtype",
    "chunked": f": cross-entropy in {LOSS_CHUNKS} token chunks (torchtune CEWithChunkedOutputLoss; a stack whose "
               "own chunking differs says so in its model-code line): every chunk's float32 log-softmax kept, the "
               "loss-boundary gradients one chunk at a time",
    "fused": ": a fused cross-entropy kernel over 16-bit logits (flash-attn Triton, llm-foundry): 16-bit logits kept, "
             "one 16-bit gradient in backward",
    "fused-linear": f": fused linear cross-entropy (Liger-Kernel style) in {LOSS_CHUNKS} token chunks: no logits "
                    "kept, one chunk's float32 logits and gradient at a time",
    "megatron": ": logits in the model dtype plus a float32 softmax (Megatron-LM vocab-parallel cross-entropy)",
    "cce": ": Cut Cross-Entropy (Apple cut_cross_entropy, as Unsloth calls it): no logits outside on-chip tiles; a "
           "float32 log-sum-exp per token kept; its backward allocates the hidden states' gradient and a 16-bit "
           "gradient of the output-layer matrix (also when frozen)",
}


# Step-time assumptions of the kernel levers (stated, not calibrated):
COMPILE_MEM_FRACTION = 0.6    # torch.compile: memory-bound (elementwise, norm) time left after inductor's fusion
FP8_CAST_FRACTION = 0.15      # FP8 GEMMs: amax, scale and cast kernels, as a share of the bf16 GEMM time


def kernel_note(cfg: TrainingConfig) -> str:
    """The assumption line of torch.compile, Float8 and TE fp8 (memory and step time)."""
    return _kernel_note(cfg.compile, cfg.float8, cfg.precision == "fp8", cfg.async_tp and cfg.plan.tp > 1)


@lru_cache(maxsize=64)
def _kernel_note(compiled: bool, float8: bool, te_fp8: bool, async_tp: bool) -> str:
    parts = [("torch.compile: inductor recomputes a gated MLP's pointwise ops in backward (it keeps gate and up "
              "only; a GeLU MLP keeps what eager keeps, as measured on an H200); step time: memory-bound ops at "
              f"{COMPILE_MEM_FRACTION:.0%} of their eager "
              "time (fusion)") if compiled else "eager PyTorch: no torch.compile fusion"]
    if float8:
        parts.append("torchao Float8: GEMMs at the GPU's fp8 dense peak (+"
                     f"{FP8_CAST_FRACTION:.0%} of the bf16 GEMM time for amax/scale/cast kernels), FSDP all-gathers "
                     "the blocks in fp8 (1 B per parameter); activations saved in bf16 (torchao saves the "
                     "high-precision inputs); embedding and output layer stay bf16")
    if te_fp8:
        parts.append("fp8 (Transformer Engine style): bf16 weights with fp32 master weights, the fp8 copy of each "
                     "weight and of its transpose cached (2 B per parameter), GEMM inputs saved in fp8, GEMMs at "
                     f"the fp8 dense peak (+{FP8_CAST_FRACTION:.0%} for casts); attention and MFU in bf16")
    if not (float8 or te_fp8):
        parts.append("no FP8 (add --float8 or --precision fp8)")
    if async_tp:
        parts.append("AsyncTP: each tensor-parallel all-gather / reduce-scatter cut into tp chunks pipelined "
                     "against its GEMM (exposed: the comm beyond the GEMM time + one chunk; needs the TP group inside "
                     "one NVLink node, otherwise exposed)")
    return "; ".join(parts)


def host_link_gbps(gpu: GpuSpec) -> float:
    return HOST_LINK_GBPS.get(gpu.architecture.split()[0], HOST_LINK_DEFAULT_GBPS)


def offload_seconds(cfg: TrainingConfig, gpu: GpuSpec, local_params: float, saved_bytes: float,
                    micro_compute_s: float) -> tuple[float, str | None]:
    """(exposed seconds per step, assumption line) of CPU, optimizer and activation offload: host copies of
    parameters and activations overlap the micro-step's compute (prefetch on a side stream); the CPU optimizer
    step and, under optimizer offload (DeepSpeed ZeRO-Offload), its once-a-step copies do not."""
    act_off = activation_offload(cfg)
    if not (cfg.cpu_offload or act_off or cfg.offload_optimizer):
        return 0.0, None
    link = host_link_gbps(gpu) * 1e9
    shard = local_params / (cfg.plan.dp * cfg.plan.cp)
    copy = 0.0
    if cfg.cpu_offload:        # fp32 shard to the GPU for the forward and backward gathers, fp32 gradient back
        copy += 3 * shard * 4 / link
    if act_off:                 # each saved byte out in forward and back in backward
        copy += 2 * saved_bytes / link
    exposed = cfg.grad_accum * max(0.0, copy - micro_compute_s)
    # ZeRO-Offload: this GPU's optimizer partition (all of it without ZeRO) steps on the host; its 16-bit gradients
    # go down and the updated 16-bit parameters come back once per step, after the backward
    states = (shard if cfg.plan.zero >= 1 else local_params) if cfg.offload_optimizer else 0.0
    step_copy = 2 * states * 2 / link
    cpu_step = (shard if cfg.cpu_offload else states) / CPU_ADAM_PARAMS_PER_S
    text = (f"offload step time: host copies at {host_link_gbps(gpu):g} GB/s per GPU (PCIe generation of "
            f"{gpu.architecture.split()[0]}, assumed) overlapped with each micro-step's compute "
            f"({exposed:.3g} s exposed per step)"
            + (f"; optimizer offload: 16-bit gradients to the host and parameters back once per step "
               f"({step_copy:.3g} s, not overlapped)" if cfg.offload_optimizer else "")
            + (f"; CPU Adam step {cpu_step:.3g} s ({CPU_ADAM_PARAMS_PER_S:.2g} parameters/s per GPU, assumed; not "
               "overlapped)" if cpu_step else ""))
    return exposed + step_copy + cpu_step, text
