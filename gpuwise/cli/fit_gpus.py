"""`gpuwise fit-gpus MODEL ...`: per GPU type, the fewest GPUs and the parallel plan that fit."""

from __future__ import annotations

import argparse

from gpuwise.cli.memory_flags import add_training_flags, config_dict, gpus_from, training_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_flags(parser, plan_flags=False)
    parser.set_defaults(recompute=None)     # searched unless given
    parser.add_argument("--max-gpus", type=int, default=1024, metavar="N", help="largest GPU count tried (default 1024)")
    parser.add_argument("--gpus-per-node", type=int, default=8, metavar="G",
                        help="GPUs per node; tensor parallelism stays inside one (default 8)")


def run(args: argparse.Namespace) -> int:
    from gpuwise.errors import InputError
    from gpuwise.plan.fit_gpus import fit_gpus
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import RECOMPUTE

    spec = load_model(args.model)
    recompute = args.recompute
    if recompute is not None and recompute not in RECOMPUTE:
        raise InputError("recompute", recompute, "use one of " + ", ".join(RECOMPUTE))
    if args.max_gpus <= 0:
        raise InputError("max-gpus", args.max_gpus, "must be a positive integer")
    if args.gpus_per_node <= 0:
        raise InputError("gpus-per-node", args.gpus_per_node, "must be a positive integer")
    args.recompute = "none"
    cfg = training_config(args, spec, plan_flags=False)
    from gpuwise.estimate.memory import check_config

    check_config(spec, cfg)
    from gpuwise.cli.progress import progress, wanted

    gpus = gpus_from(args)
    with progress("fewest GPUs per type", len(gpus), enabled=wanted(args)) as bar:
        fits = fit_gpus(spec, cfg, gpus, max_gpus=args.max_gpus, gpus_per_node=args.gpus_per_node,
                        recompute=recompute, on_progress=bar.callback)
    assumptions = [
        f"micro-batch {cfg.micro_batch} per GPU x {cfg.seq_len} tokens; plans searched: tp within a node of "
        f"{args.gpus_per_node} dividing heads and KV heads, pp <= layers, cp, ZeRO 0-3, recompute"
        + (f" {recompute} only" if recompute else " none/selective/full (none/op/full with flash attention)")
        + ", sequence parallel whenever tp > 1 (the frameworks' default)",
        "ranked by fewest GPUs, then a communication/recompute proxy (recompute full 0.33, op 0.12, selective 0.03; "
        "0.04 per doubling of tp; 0.05 per doubling of cp; pipeline bubble (pp-1)/(m+pp-1); ZeRO-3 0.10), then "
        "smaller GPU memory",
        "pipeline plans run at least pp micro-batches per step (grad_accum raised to pp)",
    ]
    code = _none_fits(spec, cfg, fits, args)
    first = next((f.memory for f in fits if f.memory is not None), None)
    if first is not None:
        assumptions += [a for a in first.assumptions if not a.startswith(("ZeRO stage", "1F1B", "context parallel"))]
    if args.json:
        from gpuwise.cli.output import emit_json

        results = []
        for f in fits:
            if f.gpus is None:
                results.append({"gpu": f.gpu.name, "memory_gib": f.gpu.memory_gib, "gpus": None, "reason": f.reason})
                continue
            c, m = f.config, f.memory
            p = c.plan
            results.append({"gpu": f.gpu.name, "memory_gib": f.gpu.memory_gib, "gpus": f.gpus,
                            "nodes": -(-f.gpus // args.gpus_per_node),
                            "plan": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "cp": p.cp, "sp": p.sp, "zero": p.zero,
                                     "recompute": c.recompute, "grad_accum": c.grad_accum, "label": p.label()},
                            "per_gpu_gib": round(m.per_gpu_gib, 4),
                            **{f"{k}_gib": round(v, 4) for k, v in m.fit_gib(f.gpu).items()
                               if k in ("required", "device", "headroom", "usable", "spare")},
                            "breakdown_gib": {k: round(v, 4) for k, v in m.breakdown_gib().items()},
                            "alternatives": f.alternatives})
        emit_json({"model": spec.name, "params": first.params if first else None,
                   "trainable_params": first.trainable_params if first else None,
                   "config": config_dict(cfg), "results": results, "assumptions": assumptions})
        return code
    from gpuwise.cli.output import print_assumptions, print_table

    rows = []
    for rank, f in enumerate(fits, 1):
        if f.gpus is None:
            rows.append(("-", f.gpu.name, f"{f.gpu.memory_gib:g}", "-", f.reason, "", "", "", "", ""))
            continue
        c, m, p = f.config, f.memory, f.config.plan
        rows.append((rank, f.gpu.name, f"{f.gpu.memory_gib:g}", f.gpus, p.label(), c.recompute,
                     f"{m.required / 2 ** 30:.1f}", f"{m.fit_gib(f.gpu)['usable']:.1f}",
                     f"{m.headroom_gib(f.gpu):+.1f}", f.alternatives))
    print(f"{spec.name}: micro-batch {cfg.micro_batch} x {cfg.seq_len} tokens, {cfg.precision}, {cfg.optimizer}"
          + (f", LoRA r={cfg.lora_rank}" if cfg.lora_rank else "") + (f", {cfg.quantize}" if cfg.quantize else ""))
    print_table("Fewest GPUs per type (best plan on that count)",
                ["#", "GPU", "GB", "GPUs", "plan", "recompute", "required GiB", "usable GiB", "spare GiB", "other plans"],
                rows)
    print_assumptions(assumptions)
    return code


def _none_fits(spec, cfg, fits, args) -> int:
    """1 with the binding constraint on stderr when no GPU type holds the job on --max-gpus GPUs."""
    import sys

    from gpuwise.estimate.goodput import JobGoodput

    if any(f.gpus is not None for f in fits) or not fits:
        return 0
    from gpuwise.estimate.feasible_plans import stack_gpu_limit

    limit = stack_gpu_limit(cfg, args.max_gpus)
    floor = JobGoodput.for_config(spec, cfg).memory_floor(limit, args.gpus_per_node)
    largest = max(fits, key=lambda f: f.gpu.memory_gib).gpu
    least = f"{floor.per_gpu_gib:,.1f} GiB per GPU at best" if floor is not None else "no plan"
    more = "raise --max-gpus" if limit == args.max_gpus else f"use a stack that trains on several GPUs ({cfg.stack}: one)"
    sys.stderr.write(f"gpuwise fit-gpus: no feasible answer: memory binds ({least} on up to {limit} GPUs, "
                     f"largest GPU {largest.name} {largest.memory_gib:g} GiB); nearest feasible: lower --batch-size "
                     f"or --seq-len, or {more}\n")
    return 1
