"""`gpuwise estimate`: step time, throughput, MFU, time to target and cost of one job.

    gpuwise estimate JOB.yaml --gpu NAME --gpus N [--nodes M] [--spot] [--json]
    gpuwise estimate --model MODEL --gpu NAME --gpus N --batch-size B --seq-len L --precision P
                     --zero Z --recompute R [--grad-accum A] [--tp T] [--pp P] [--cp C] [--tokens T]
                     [--quantize Q] [--offload-optimizer] [--no-flash-attention] [--pp-schedule S] [levers]
                     [--price USD_PER_GPU_HOUR] [--spot] [--json]
"""

from __future__ import annotations

import argparse
import math

from gpuwise.cli.memory_flags import LEVER_NAMES as LEVERS

# Defaults of the job-by-flags form. They are applied after parsing (the flags default to None) so that
# a flag typed next to a JOB.yaml is refused instead of silently ignored.
FLAG_DEFAULTS = {"zero": 0, "zero_shard": 0, "recompute": "none", "grad_accum": 1,
                 "tp": 1, "pp": 1, "cp": 1, "optimizer": "adamw", "lora_rank": 0,
                 "stack": "pytorch", "pp_schedule": "1f1b", "offload_optimizer": False, "no_flash_attention": False}
# precision: the stack's default when not given (memory_flags.precision_for)
FLAG_ONLY = ("model", "batch_size", "tokens", "seq_len", "precision", "quantize", *FLAG_DEFAULTS, *LEVERS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuwise.cli.memory_flags import add_lever_flags, add_model_flags, add_schedule_flag
    from gpuwise.workload.training import OPTIMIZERS, STACKS

    parser.add_argument("job", nargs="?", help="job spec YAML (see examples/); omit to give the job by flags")
    parser.add_argument("--gpu", required=True, help="GPU type, e.g. H100, A100-80GB (see gpuwise gpus)")
    parser.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    parser.add_argument("--nodes", type=int, help="number of nodes (default: fewest with <= 8 GPUs each)")
    parser.add_argument("--spot", action="store_true", help="spot/preemptible pricing and preemption overheads")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--price", type=float, help="price per GPU-hour in USD (default: cheapest catalog offering)")
    parser.add_argument("--inter-node-gbps", type=float, help="node network bandwidth in GB/s, gigabytes (100 Gb/s Ethernet = 12.5; default by GPU class)")
    flags = parser.add_argument_group("job by flags (instead of JOB.yaml)")
    flags.add_argument("--model", help="model preset, config.json path or Hugging Face id (owner/name)")
    flags.add_argument("--batch-size", type=int, help="per-GPU micro-batch (sequences or samples)")
    flags.add_argument("--seq-len", type=int,
                       help="tokens per sequence (default 2048, or the model's position table if shorter)")
    flags.add_argument("--precision", help="fp32 | bf16-mixed | fp16-mixed | bf16 (default: the stack's)")
    flags.add_argument("--zero", type=int, help="ZeRO stage 0-3 (3 = FSDP full shard)")
    flags.add_argument("--zero-shard", type=int, metavar="K",
                       help="hybrid ZeRO-1: optimizer states sharded over groups of K of the dp x cp ranks (InternEvo zero1 size), the updated parameters all-gathered in the group after the step; needs --zero 1 (default 0: the whole dp x cp group)")
    flags.add_argument("--recompute", help="activation recomputation: none | selective | op | layer-K | full")
    flags.add_argument("--stack", help="training stack whose defaults and kernel efficiencies apply: "
                       + " | ".join(STACKS) + " (default pytorch)")
    flags.add_argument("--grad-accum", type=int, help="micro-steps per optimizer step")
    flags.add_argument("--tp", type=int, help="tensor-parallel size")
    flags.add_argument("--pp", type=int, help="pipeline stages")
    add_schedule_flag(flags, unset=True)
    flags.add_argument("--cp", type=int, help="context-parallel size: the sequence split over C GPUs, K/V passed "
                                              "round a ring (default 1)")
    flags.add_argument("--optimizer", help=" | ".join(OPTIMIZERS) + " (default adamw)")
    flags.add_argument("--lora-rank", type=int, help="LoRA rank (0 = full fine-tuning)")
    flags.add_argument("--tokens", type=float, help="training tokens (or samples for non-token models)")
    add_model_flags(flags, unset=True)
    add_lever_flags(flags)


def _positive(name: str, value: int | float | None, allow_zero: bool = False) -> None:
    """A finite number > 0 (>= 0 with allow_zero); NaN and infinities are refused too."""
    from gpuwise.errors import InputError

    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(name, value, "must be a finite number " + (">= 0" if allow_zero else "> 0"))


def _small_vm_network(args, gpu, gpus_per_node: int) -> None:
    """Without --inter-node-gbps, a node smaller than its GPU's largest catalog host gets that host's NIC
    share, as `plan` prices the same shape (e.g. ZeRO-3 over eight 1-GPU L4 VMs)."""
    if args.inter_node_gbps is not None:
        return
    from gpuwise.estimate.step_time import default_inter_node_gbps
    from gpuwise.hardware.catalog import load_catalog
    from gpuwise.plan.offerings import vm_network_gbps

    share = vm_network_gbps(gpu.name, gpus_per_node, load_catalog())
    if share is not None and share < default_inter_node_gbps(gpu)[0]:
        args.inter_node_gbps = share


def _layout(args, default_gpn: int | None = None) -> tuple[int, int]:
    from gpuwise.errors import InputError

    _positive("--gpus", args.gpus)
    _positive("--nodes", args.nodes)
    if args.nodes:
        if args.nodes > args.gpus:
            raise InputError("--nodes", args.nodes, f"must be <= --gpus ({args.gpus})")
        if args.gpus % args.nodes:
            raise InputError("--nodes", args.nodes, f"--gpus {args.gpus} must split evenly over the nodes")
        return args.gpus // args.nodes, args.nodes
    gpn = default_gpn or min(args.gpus, 8)
    return gpn, math.ceil(args.gpus / gpn)


def _from_flags(args):
    from gpuwise.errors import InputError
    from gpuwise.estimate.job_estimate import Amount, estimate
    from gpuwise.estimate.memory import check_config
    from gpuwise.estimate.performance import job_performance
    from gpuwise.estimate.stat_efficiency import NoiseModel
    from gpuwise.hardware.gpus import user_gpu
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    if not args.model:
        raise InputError("JOB", None, "give a job spec YAML or --model MODEL (see gpuwise estimate --help)")
    if args.batch_size is None:
        raise InputError("--batch-size", None, "give the per-GPU micro-batch with --model")
    for name in ("batch_size", "seq_len", "grad_accum", "tp", "pp", "cp", "tokens"):
        _positive("--" + name.replace("_", "-"), getattr(args, name))
    gpu = user_gpu(args.gpu, "--gpu")
    model = load_model(args.model)
    from gpuwise.cli.memory_flags import seq_len_for
    from gpuwise.workload.models import for_seq_len

    args.seq_len = seq_len_for(model, args.seq_len)
    model = for_seq_len(model, args.seq_len)         # the model the run builds (a position table sized per run)
    gpn, nodes = _layout(args)
    _small_vm_network(args, gpu, gpn)
    width = args.tp * args.pp * args.cp
    if args.gpus % width:
        raise InputError("--gpus", args.gpus, f"must be a multiple of tp*pp*cp = {width}")
    plan = ParallelPlan(dp=args.gpus // width, tp=args.tp, pp=args.pp, cp=args.cp, zero=args.zero,
                        zero_shard=args.zero_shard, sp=args.tp > 1, pp_schedule=args.pp_schedule)
    from gpuwise.cli.memory_flags import lever_fields, model_fields, precision_for

    cfg = TrainingConfig(micro_batch=args.batch_size, seq_len=args.seq_len, grad_accum=args.grad_accum,
                         precision=precision_for(args), optimizer=args.optimizer, recompute=args.recompute,
                         lora_rank=args.lora_rank, plan=plan, stack=args.stack, **model_fields(args),
                         **lever_fields(args))
    check_config(model, cfg)
    from gpuwise.estimate.levers import refuse_blocked

    refuse_blocked(cfg)
    amount = Amount(None, "")
    if args.tokens:
        token = model.sample_unit == "token"
        samples = args.tokens / args.seq_len if token else args.tokens
        amount = Amount(NoiseModel(math.inf, cfg.global_batch(), samples),
                        f"training amount: {args.tokens:.4g} {'tokens' if token else 'samples'} at global batch "
                        f"{cfg.global_batch()} (steps = amount / batch)")
    args.evaluated = (model, cfg, gpu, gpn)   # for the nearest feasible option if it does not fit
    perf = job_performance(model, cfg, gpu, gpn, nodes, args.inter_node_gbps, amount.noise)
    return estimate(perf, amount, args.spot, args.price)


def _from_spec(args):
    """The job's goodput object on this one hardware shape (the same search `gpuwise plan`, the policies,
    the simulator and the service ask: estimate.goodput.JobGoodput), then the full estimate of its choice."""
    from gpuwise.errors import Infeasible
    from gpuwise.estimate.job_estimate import Amount, estimate
    from gpuwise.estimate.performance import job_performance
    from gpuwise.hardware.gpus import user_gpu
    from gpuwise.plan.job import from_jobspec
    from gpuwise.workload.jobspec import load_job

    job = load_job(args.job)
    gpu = user_gpu(args.gpu, "--gpu")
    t = job.training
    gpn, nodes = _layout(args, min(job.parallelism.gpus_per_node or 8, args.gpus))
    _small_vm_network(args, gpu, gpn)
    pj = from_jobspec(job, gpus=[gpu.name], require_amount=False, inter_node_gbps=args.inter_node_gbps)
    from gpuwise.errors import InputError
    from gpuwise.estimate.levers import stack_gpus_refusal

    why = stack_gpus_refusal(pj.base.stack, args.gpus)          # a one-GPU stack on several GPUs: exit 2
    if why:
        raise InputError(*why)
    res = pj.goodput.shape(gpu.name, gpn, nodes, gpus=args.gpus)
    if res.best is None:
        why = (f"no allowed tp/pp/cp/zero plan fits {pj.model.name} in {gpu.memory_gib:g} GiB per GPU"
               if res.reason == "memory" else f"no micro-batch x accumulation on {args.gpus} GPUs gives a global "
                                             f"batch in {list(pj.batch_range)}")
        # a long sequence's activations and logits shrink only with context parallelism, which a spec opts into
        cp = ("; allow context parallelism (parallelism.cp: [1, 2, 4, 8]) for this sequence length"
              if res.reason == "memory" and job.parallelism.cp == [1] and t.seq_len >= 16384 else "")
        from gpuwise.estimate.layouts import zero_shard_hint

        groups = zero_shard_hint(pj.space, args.gpus, gpn)
        cp += f"; {groups}" if groups else ""
        near = _spec_nearest(pj, gpu, args.gpus, gpn) if res.reason == "memory" else ""
        raise Infeasible("--gpus", args.gpus, f"{why}; {near}try more GPUs, a larger GPU or `gpuwise fit-gpus "
                                              f"{pj.model.name}`{cp}")
    cfg = res.best.config
    lo, hi = t.batch_range
    notes = [f"plan, micro-batch and global batch: the fastest to target of {res.evaluated} timed on this shape "
             "(the planner's search: allowed tp/pp/ZeRO, lightest recompute that fits, global batches "
             f"{list(pj.batches)})"]
    if lo == hi and cfg.global_batch() != lo:
        notes.append(f"global batch {lo} rounded to {cfg.global_batch()} = micro-batch x accumulation x "
                     f"{cfg.plan.dp} data-parallel replicas")
    amount = Amount(None, "")
    if t.amount_samples(pj.model.sample_unit == "token") is not None:
        what = ("tokens" if t.tokens else "samples" if t.samples else "epochs" if t.epochs else "steps")
        desc = (f"training amount from the spec ({what}): {pj.noise.samples_at_ref:.4g} samples at reference "
                f"batch {pj.noise.ref_batch}")
        if not t.noise_scale and lo != hi:
            desc += "; no noise_scale given, so larger batches are assumed to need no extra samples"
        amount = Amount(pj.noise, desc)
    ck = job.checkpoint
    args.evaluated = (pj.model, cfg, gpu, gpn)
    perf = job_performance(pj.model, cfg, gpu, gpn, nodes, args.inter_node_gbps, amount.noise, ck.size_gb)
    out = estimate(perf, amount, args.spot, args.price, ck.write_gbps, ck.interval_minutes, ck.restart_minutes,
                   job.deadline_hours, job.budget_usd, notes)
    return {"job": job.name, **out}


def _spec_nearest(pj, gpu, gpus: int, gpus_per_node: int) -> str:
    """'nearest feasible: ...; ' for a job spec none of whose allowed plans fits in memory: the nearest option of
    any layout and recompute at the spec's first micro-batch (JobGoodput.nearest_fitting, as the flags' answer and
    plan's hint ask every layout), which the spec's parallelism or recompute must allow; '' if nothing fits."""
    found = pj.goodput.nearest_fitting(gpu, gpus, gpus_per_node)
    if found is None:
        return ""
    return f"{_nearest_text(found, gpu)} (allow its tp/pp/cp/zero in parallelism and its recompute in training); "


def _nearest_text(found, gpu) -> str:
    """'nearest feasible: N x GPU with plan P, recompute R' of JobGoodput.nearest_fitting's answer."""
    n, plans = found
    c = plans[0][0]
    return f"nearest feasible: {n} x {gpu.name} with plan {c.plan.label()}, recompute {c.recompute}"


def _host_bound(out: dict) -> str:
    """' (host-bound ...)' where the estimate says the host's dispatch is the step time (estimate.host_ops)."""
    return " (host-bound: the host dispatches the step's eager ops more slowly than the GPU runs them)" \
        if out.get("host_bound") else ""


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0 or 1e-3 <= abs(v) < 1e6:
            return f"{v:,.4g}{unit}"
        return f"{v:.3e}{unit}"
    return f"{v}{unit}"


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.output import emit_json, print_assumptions, print_table

    from gpuwise.errors import InputError

    typed = ["--" + d.replace("_", "-") for d in FLAG_ONLY if getattr(args, d) is not None]
    if args.job and typed:
        raise InputError(typed[0], getattr(args, typed[0][2:].replace("-", "_")),
                         "the job comes from JOB.yaml; edit the file, or drop JOB.yaml to give the job by flags")
    for dest, value in FLAG_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    _positive("--price", args.price, allow_zero=True)
    _positive("--inter-node-gbps", args.inter_node_gbps)
    out = _from_spec(args) if args.job else _from_flags(args)
    if out.get("fits") is False:
        out["infeasible"] = _does_not_fit(out, *args.evaluated)
    if args.json:
        emit_json(out)
        return _exit_code(out)
    rows = [("model", out["model"]), ("GPUs", f"{out['gpus']} x {out['gpu']} on {out['nodes']} node(s)"),
            ("layout", "dp{dp} tp{tp} pp{pp} cp{cp} zero{zero}".format(**out["plan"])
             + (f"/{out['plan']['zero_shard']}" if out["plan"].get("zero_shard") else "")),
            ("batch", f"global {out['global_batch']} = micro {out['micro_batch']} x accum {out['grad_accum']} x dp"),
            ("step time", _fmt(out["step_time_s"], " s") + _host_bound(out)), ("MFU", f"{out['mfu']:.1%}")]
    if "tokens_per_second" in out:
        rows += [("tokens/s", _fmt(out["tokens_per_second"])), ("tokens/s per GPU", _fmt(out["tokens_per_second_per_gpu"]))]
    rows += [("samples/s", _fmt(out["samples_per_second"])), ("samples/s per GPU", _fmt(out["samples_per_second_per_gpu"]))]
    if "memory_gib" in out:
        rows += _memory_rows(out["memory_gib"], out["fits"])
    if "time_to_target_hours" in out:
        t = _fmt(out["time_to_target_hours"], " h")
        if "time_to_target_hours_p10" in out:
            t += (f"  (p10 {_fmt(out['time_to_target_hours_p10'])} / p50 {_fmt(out['time_to_target_hours_p50'])}"
                  f" / p90 {_fmt(out['time_to_target_hours_p90'])} h)")
        rows += [("steps", _fmt(out["steps"])), ("time to target", t)]
    if "price" in out:
        rows.append(("price", f"${out['price']['usd_per_gpu_hour']:.4g}/GPU-h ({out['price']['source']})"))
    if "cost_usd" in out:
        c = f"${out['cost_usd']:,.2f}"
        if "cost_usd_p90" in out:
            c += f"  (p10 ${out['cost_usd_p10']:,.0f} / p90 ${out['cost_usd_p90']:,.0f})"
        rows.append(("cost", c))
    for k in ("meets_deadline", "within_budget"):
        if k in out:
            rows.append((k.replace("_", " "), "yes" if out[k] else "NO"))
    print_table(f"gpuwise estimate: {out.get('job', out['model'])}", ["quantity", "value"], rows, ["left", "left"])
    print_assumptions(out["assumptions"])
    return _exit_code(out)


def _memory_rows(m: dict, fits: bool) -> list[tuple[str, str]]:
    """Per-GPU memory as `fits` decides it: required against usable, then what the allocator holds."""
    from gpuwise.estimate.memory import cache_text

    return [("memory per GPU", f"required {m['required']:.1f} GiB {'<=' if fits else '>'} usable {m['usable']:.1f} GiB "
                               f"({'fits' if fits else 'DOES NOT FIT'})"),
            ("  required", f"allocated {m['allocated']:.1f} GiB + CUDA context + NCCL"),
            ("  usable", f"device {m['device']:.1f} GiB less headroom {m['headroom']:.1f} GiB "
                         f"({m['headroom'] / m['device']:.0%} kept free); "
                         f"{m['spare']:+.1f} GiB spare"),
            ("  reserved", f"{m['reserved']:.1f} GiB by the caching allocator; with context + NCCL "
                           + cache_text(m["device_total"], m["device"]))]


def _does_not_fit(out: dict, model, cfg, gpu, gpus_per_node: int) -> dict:
    """The binding constraint (memory) and the nearest feasible option (JobGoodput.nearest_fitting): another
    plan or recompute on the GPUs asked for, else the fewest GPUs of this type on which some parallel plan of
    the same micro-batch and sequence fits."""
    from gpuwise.estimate.goodput import JobGoodput

    found = JobGoodput.for_config(model, cfg).nearest_fitting(gpu, cfg.plan.gpus, gpus_per_node)
    m = out["memory_gib"]
    need = f"required {m['required']:.1f} GiB per GPU > usable {m['usable']:.1f} GiB of {gpu.name}"
    if found is None:
        return {"binding": "memory", "detail": need, "nearest": None,
                "fix": f"nothing fits on up to 1024 x {gpu.name}; lower the micro-batch or sequence length, "
                       "or see gpuwise fit-gpus"}
    n, plans = found
    c = plans[0][0]
    return {"binding": "memory", "detail": need, "nearest": {"gpu": gpu.name, "gpus": n, "plan": c.plan.label(),
                                                             "recompute": c.recompute},
            "fix": f"{_nearest_text(found, gpu)} (gpuwise fit-gpus lists every GPU type)"}


def _exit_code(out: dict) -> int:
    """1 when the configuration does not fit (valid input, no feasible answer), with the reason on stderr."""
    import sys

    bad = out.get("infeasible")
    if not bad:
        return 0
    sys.stderr.write(f"gpuwise estimate: does not fit: {bad['detail']}; {bad['fix']}\n")
    return 1
