"""Training flags shared by `gpuwise memory` and `gpuwise fit-gpus` (defaults stated in --help)."""

from __future__ import annotations

import argparse

DEFAULT_GPUS = ("T4", "L4", "A10G", "V100-32GB", "A100-40GB", "A100-80GB", "H100", "H200", "MI300X")
DEFAULT_SEQ = 2048


def add_training_flags(parser: argparse.ArgumentParser, plan_flags: bool = True) -> None:
    """Flags describing one training configuration (plan_flags: also --gpus/--tp/--pp/--cp/--zero/--sp)."""
    from gpuwise.workload.training import OPTIMIZERS, PRECISIONS, RECOMPUTE_POLICIES, STACKS

    parser.add_argument("model", metavar="MODEL", help="preset name (gpuwise models), path to a config.json, or a "
                        "Hugging Face id such as meta-llama/Llama-3.1-8B (pip install 'gpuwise[hf]')")
    parser.add_argument("--batch-size", type=int, default=1, metavar="B", help="micro-batch per GPU (default 1)")
    parser.add_argument("--seq-len", type=int, default=None, metavar="L",
                        help=f"tokens per sequence (default {DEFAULT_SEQ}, capped at the model's position table)")
    parser.add_argument("--grad-accum", type=int, default=1, metavar="A", help="micro-batches per step (default 1)")
    parser.add_argument("--precision", default=None, metavar="P",
                        help=f"{' | '.join(PRECISIONS)} (default: the stack's, bf16-mixed for pytorch)")
    parser.add_argument("--stack", default="pytorch", metavar="S",
                        help=f"training stack whose defaults apply: {' | '.join(STACKS)} (default pytorch)")
    parser.add_argument("--optimizer", default="adamw", metavar="O", help=f"{' | '.join(OPTIMIZERS)} (default adamw)")
    parser.add_argument("--recompute", default="none", metavar="R",
                        help=f"activation recompute {' | '.join(RECOMPUTE_POLICIES)} (selective = Megatron attention "
                        "core, op / layer-K = torchtitan selective AC; default none)")
    parser.add_argument("--lora-rank", type=int, default=0, metavar="R", help="LoRA rank; 0 = full fine-tuning (default)")
    add_model_flags(parser)
    add_lever_flags(parser)
    if plan_flags:
        parser.add_argument("--gpus", type=int, default=1, metavar="N", help="GPUs in all (default 1); dp = N/(tp*pp*cp)")
        parser.add_argument("--zero", type=int, default=0, metavar="Z", help="ZeRO stage 0-3 over dp (FSDP = 3; default 0)")
        parser.add_argument("--zero-shard", type=int, default=0, metavar="K",
                            help="hybrid ZeRO-1: optimizer states sharded over groups of K of the dp x cp ranks (InternEvo zero1 size), the updated parameters all-gathered in the group after the step; needs --zero 1 (default 0: the whole dp x cp group)")
        parser.add_argument("--tp", type=int, default=1, metavar="T", help="tensor parallel (default 1)")
        parser.add_argument("--pp", type=int, default=1, metavar="P", help="pipeline stages (default 1)")
        add_schedule_flag(parser)
        parser.add_argument("--cp", type=int, default=1, metavar="C", help="context parallel (default 1)")
        sp = parser.add_mutually_exclusive_group()
        sp.add_argument("--sp", dest="sp", action="store_true", default=None,
                        help="sequence parallel (default: on whenever --tp > 1, as Megatron-core and torchtitan do)")
        sp.add_argument("--no-sp", dest="sp", action="store_false", help="tensor parallelism without sequence parallel")
    parser.add_argument("--gpu", action="extend", nargs="+", default=None, metavar="NAME",
                        help="GPU types to check (default: " + ", ".join(DEFAULT_GPUS) + ")")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_model_flags(parser, unset: bool = False) -> None:
    """--quantize, --offload-optimizer and --no-flash-attention (shared with `gpuwise estimate`, whose flags
    default to None (`unset`) so that one typed next to a JOB.yaml is refused)."""
    off = None if unset else False
    parser.add_argument("--quantize", default=None, metavar="Q",
                        help="quantised frozen base: nf4 (bitsandbytes QLoRA) | gptq-int4 | gptq-int8 (a GPTQ "
                             "checkpoint under Hugging Face + PEFT, AutoGPTQ's kernels, group size 128)")
    parser.add_argument("--offload-optimizer", action="store_true", default=off,
                        help="optimizer states in host memory")
    parser.add_argument("--no-flash-attention", action="store_true", default=off,
                        help="eager attention (keeps s^2 scores)")


def add_schedule_flag(parser, unset: bool = False) -> None:
    from gpuwise.workload.training import PP_SCHEDULES

    parser.add_argument("--pp-schedule", default=None if unset else "1f1b", metavar="S",
                        help=f"pipeline schedule {' | '.join(PP_SCHEDULES)} (default 1f1b)")


def model_fields(args: argparse.Namespace) -> dict:
    """TrainingConfig fields of add_model_flags."""
    return {"quantize": args.quantize.lower() if args.quantize else None,
            "offload_optimizer": bool(args.offload_optimizer), "flash_attention": not args.no_flash_attention}


def add_lever_flags(parser: argparse.ArgumentParser) -> None:
    """The levers of gpuwise.estimate.levers (shared with `gpuwise estimate`)."""
    from gpuwise.workload.training import LORA_DEFAULT, LOSS_CHUNKS, LOSS_KERNELS, OPTIMIZER_IMPLS

    parser.add_argument("--cpu-offload", action="store_true", default=None,
                        help="FSDP CPU offload of parameters, gradients and optimizer state (needs --zero 3)")
    loss = parser.add_mutually_exclusive_group()
    loss.add_argument("--chunked-loss", dest="loss_kernel", action="store_const", const="chunked",
                      help=f"cross-entropy in {LOSS_CHUNKS} token chunks (= --loss-kernel chunked)")
    loss.add_argument("--loss-kernel", dest="loss_kernel", default=None, metavar="K",
                      help=f"{' | '.join(LOSS_KERNELS)} (default: the stack's, eager for pytorch)")
    parser.add_argument("--optimizer-impl", default=None, metavar="I",
                        help=f"{' | '.join(OPTIMIZER_IMPLS)}: the optimizer step's kernel (default: the stack's; plain "
                             "torch.optim.AdamW on CUDA is foreach)")
    parser.add_argument("--optimizer-in-backward", action="store_true", default=None,
                        help="step each parameter in its gradient hook (no full gradient set; no grad accumulation)")
    parser.add_argument("--activation-offload", action="store_true", default=None,
                        help="saved activations offloaded to host memory")
    parser.add_argument("--compile", action="store_true", default=None,
                        help="torch.compile of each block (fused pointwise ops; MLP keeps fewer activations)")
    parser.add_argument("--float8", action="store_true", default=None,
                        help="torchao Float8 training: FP8 GEMMs and FP8 all-gather under FSDP")
    parser.add_argument("--async-tp", action="store_true", default=None,
                        help="asynchronous tensor parallelism: TP collectives overlapped with GEMMs")
    parser.add_argument("--padding-mask", action="store_true", default=None,
                        help="batches carry a padding attention mask that reaches SDPA as a 4D mask (Hugging Face "
                             "models with attn_implementation=sdpa and padded batches): every key tile computed, the "
                             "b x s x s mask kept and read per head")
    parser.add_argument("--dora", action="store_true", default=None,
                        help="DoRA (weight-decomposed LoRA; PEFT use_dora, torchtune DoRALinear): each adapted linear "
                             "keeps its frozen and adapter outputs and rebuilds its weight's row norms every forward "
                             "(needs --lora-rank)")
    parser.add_argument("--lora-dropout", type=float, default=None, metavar="P",
                        help="LoRA dropout probability (each adapted linear keeps its dropout mask and its own input "
                             "copy; default: the stack's recipes', 0 for pytorch)")
    parser.add_argument("--lora-targets", default=None, metavar="T",
                        help=f"LoRA target modules q,k,v,o,gate,up,down,head (comma-separated) or all-linear "
                             f"(default: the stack's, {LORA_DEFAULT} for pytorch)")


# TrainingConfig fields that are levers (flags of memory, estimate and fit-gpus; plan reads them from the job spec)
LEVER_NAMES = ("cpu_offload", "loss_kernel", "optimizer_impl", "optimizer_in_backward", "activation_offload",
               "lora_targets", "lora_dropout", "compile", "float8", "async_tp", "padding_mask", "dora")


def lever_fields(args: argparse.Namespace) -> dict:
    """TrainingConfig fields of the lever flags that were given (the others keep their defaults), and the stack's
    LoRA targets where none are named."""
    from gpuwise.workload.stacks import stack_row

    out = {n: getattr(args, n) for n in LEVER_NAMES if getattr(args, n, None) is not None}
    row = stack_row(getattr(args, "stack", None) or "pytorch")
    out.setdefault("lora_targets", row.lora_targets)
    if getattr(args, "lora_rank", 0):                 # the stack's recipes' dropout, stated in the config
        out.setdefault("lora_dropout", row.lora_dropout)
    return out


def precision_for(args: argparse.Namespace) -> str:
    """--precision, or the stack's default precision."""
    from gpuwise.workload.stacks import stack_row

    return args.precision or stack_row(getattr(args, "stack", None) or "pytorch").precision


def seq_len_for(spec, requested: int | None) -> int:
    if requested is not None:
        return requested
    if not spec.is_transformer:
        return 1                     # explicit models: activations are given per sample
    if spec.learned_pos_emb and spec.max_seq_len:
        return min(DEFAULT_SEQ, spec.max_seq_len)
    return DEFAULT_SEQ


def training_config(args: argparse.Namespace, spec, plan_flags: bool = True):
    """TrainingConfig from the flags; InputError for impossible combinations."""
    from gpuwise.errors import InputError
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    plan = ParallelPlan()
    if plan_flags:
        for name in ("gpus", "tp", "pp", "cp"):
            if getattr(args, name) <= 0:
                raise InputError(name, getattr(args, name), "must be a positive integer")
        if args.sp and args.tp == 1:   # SP shards activations over the TP group: alone it changes nothing
            raise InputError("--sp", "without --tp", "sequence parallelism needs tensor parallelism; add --tp 2 (or more)")
        width = args.tp * args.pp * args.cp
        if args.gpus % width:
            raise InputError("gpus", args.gpus, f"must be a multiple of tp*pp*cp = {width}")
        sp = args.tp > 1 if args.sp is None else (args.sp and args.tp > 1)   # the frameworks' default
        plan = ParallelPlan(dp=args.gpus // width, tp=args.tp, pp=args.pp, cp=args.cp, sp=sp, zero=args.zero,
                            zero_shard=args.zero_shard, pp_schedule=args.pp_schedule)
    cfg = TrainingConfig(micro_batch=args.batch_size, seq_len=seq_len_for(spec, args.seq_len),
                          grad_accum=args.grad_accum, precision=precision_for(args), optimizer=args.optimizer,
                          recompute=args.recompute, lora_rank=args.lora_rank, plan=plan, stack=args.stack,
                          **model_fields(args), **lever_fields(args))
    if plan_flags:                      # the layout is given: refuse one the levers cannot run on
        from gpuwise.estimate.levers import refuse_blocked

        refuse_blocked(cfg)
    return cfg


def gpus_from(args: argparse.Namespace):
    from gpuwise.hardware.gpus import get_gpu, user_gpu

    names = args.gpu or list(DEFAULT_GPUS)
    out, seen = [], set()
    for n in names:
        g = user_gpu(n, "--gpu") if args.gpu else get_gpu(n)
        if g.name not in seen:
            seen.add(g.name)
            out.append(g)
    return out


def config_dict(cfg) -> dict:
    p = cfg.plan
    return {"micro_batch": cfg.micro_batch, "seq_len": cfg.seq_len, "grad_accum": cfg.grad_accum,
            "precision": cfg.precision, "optimizer": cfg.optimizer, "recompute": cfg.recompute,
            "flash_attention": cfg.flash_attention, "lora_rank": cfg.lora_rank, "quantize": cfg.quantize,
            "offload_optimizer": cfg.offload_optimizer, "stack": cfg.stack, "cpu_offload": cfg.cpu_offload,
            "loss_kernel": cfg.loss_kernel, "optimizer_impl": cfg.optimizer_impl, "optimizer_in_backward": cfg.optimizer_in_backward,
            "activation_offload": cfg.activation_offload, "lora_targets": cfg.lora_targets,
            "lora_dropout": cfg.lora_dropout, "compile": cfg.compile,
            "float8": cfg.float8, "async_tp": cfg.async_tp, "padding_mask": cfg.padding_mask, "dora": cfg.dora,
            "plan": {"gpus": p.gpus, "dp": p.dp, "tp": p.tp, "pp": p.pp, "cp": p.cp, "sp": p.sp, "zero": p.zero, "zero_shard": p.zero_shard,
                     "pp_schedule": p.pp_schedule}}
