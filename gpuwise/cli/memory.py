"""`gpuwise memory MODEL ...`: per-GPU peak training memory, its breakdown, and which GPUs hold it.

Both methods answer in one schema: the tensors at the peak (estimated, or traced with --method trace),
then the same overhead model (estimate/overhead.py) for allocator slack, CUDA context and NCCL, and the
same fit test (required against the device memory PyTorch reports less headroom)."""

from __future__ import annotations

import argparse

from gpuwise.cli.memory_flags import add_training_flags, config_dict, gpus_from, training_config

GIB = 2 ** 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_flags(parser, plan_flags=True)
    parser.add_argument("--method", choices=("analytic", "trace"), default="analytic",
                        help="analytic formulas (default) or a traced PyTorch training step "
                             "(needs pip install 'gpuwise[trace]')")
    parser.add_argument("--lengths", metavar="DIST", default=None,
                        help="tokens per micro-batch, for the allocator simulation of --method trace: fixed "
                             "(default), uniform:MIN, lognormal:MEAN:SD[:drop] (--seq-len is the longest; "
                             "longer samples are clipped to it, or dropped with :drop)")
    # --pp-schedule comes with the training flags (memory_flags) and serves both methods


def fit_line(est, g) -> str:
    return (f"{g.name}: {g.total_gib:.2f} GiB device memory ({g.device_mib_source or 'datasheet GB read as 1e9 B'}); "
            + est.fit_text(g).split(": ", 1)[1])


def _levers(spec, cfg, gpus):
    """The single changes that make the job fit a GPU it does not fit (estimate.fit_levers)."""
    from gpuwise.estimate.fit_levers import fit_levers
    from gpuwise.hardware.gpus import all_gpus

    return fit_levers(spec, cfg, gpus, all_gpus())


def run(args: argparse.Namespace) -> int:
    from gpuwise.estimate.performance import job_performance
    from gpuwise.workload.models import for_seq_len, load_model

    spec = load_model(args.model)
    cfg = training_config(args, spec)
    spec = for_seq_len(spec, cfg.seq_len)           # the model the run builds (a position table sized per run)
    gpus = gpus_from(args)
    if getattr(args, "lengths", None) and getattr(args, "method", "analytic") != "trace":
        from gpuwise.errors import InputError

        raise InputError("lengths", args.lengths, "varying lengths are simulated under --method trace; add it")
    if getattr(args, "method", "analytic") == "trace":
        from gpuwise.cli.memory_trace import traced_estimate

        est, extra = traced_estimate(args, spec, cfg)
    else:
        est, extra = job_performance(spec, cfg, None).memory, {"method": "analytic"}
    return render(args, spec, cfg, est, gpus, extra)


def memory_json(est, gpus) -> dict:
    """The memory keys both methods report, with the same meanings (see MemoryEstimate)."""
    return {"per_gpu_gib": round(est.per_gpu_gib, 4), "allocated_gib": round(est.allocated / GIB, 4),
            "reserved_gib": round(est.reserved / GIB, 4), "required_gib": round(est.required / GIB, 4),
            "peak_phase": est.peak_phase, "peak_stage": est.peak_stage,
            "breakdown_gib": {k: round(v, 4) for k, v in est.breakdown_gib().items()},
            "fits": {g.name: est.fits(g) for g in gpus},
            "fit_gib": {g.name: {k: round(v, 4) for k, v in est.fit_gib(g).items()
                                 if k in ("device", "headroom", "usable", "spare")} for g in gpus}}


def render(args: argparse.Namespace, spec, cfg, est, gpus, extra: dict) -> int:
    # what would make it fit: the analytic model's single changes (the trace answers the configuration asked)
    levers = _levers(spec, cfg, gpus) if extra.get("method") == "analytic" else []
    assumptions = list(est.assumptions) + [fit_line(est, g) for g in gpus]
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"model": spec.name, "params": est.params, "trainable_params": est.trainable_params,
                   "config": config_dict(cfg), **memory_json(est, gpus), **extra,
                   "how_to_fit": [{"lever": lv.name, "cost": lv.cost, "required_gib": round(lv.required_gib, 2),
                                   "fits": list(lv.fits)} for lv in levers],
                   "assumptions": assumptions})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    p = cfg.plan
    shape = (f"{cfg.micro_batch} x {cfg.seq_len} tokens" if spec.is_transformer
             else f"{cfg.micro_batch} {spec.sample_unit}(s)")
    traced = extra["method"] != "analytic"
    print(f"{spec.name}: {est.params / 1e9:.3g}B params ({est.trainable_params / 1e9:.3g}B trainable); "
          f"{p.label()} on {p.gpus} GPU(s); micro-batch {shape}; "
          f"{cfg.precision}, {cfg.optimizer}, recompute {cfg.recompute}" + ("; tensors traced" if traced else ""))
    title = ("Per-GPU peak memory, tensors traced" if traced else "Per-GPU peak memory") + (
        f" (pipeline stage {est.peak_stage})" if p.pp > 1 else "")
    rows = [(k, f"{v:.2f}") for k, v in est.breakdown_gib().items() if k != "overhead"] + [
        ("= allocated peak (max_memory_allocated)", f"{est.allocated / GIB:.2f}"),
        ("+ allocator slack" + (" (simulated)" if extra.get("allocator", {}).get("method") == "simulated" else ""),
         f"{est.allocator / GIB:.2f}"),
        ("= reserved peak (max_memory_reserved)", f"{est.reserved / GIB:.2f}"),
        ("+ CUDA context + NCCL", f"{(est.context + est.nccl) / GIB:.2f}"),
        ("= device total per GPU (nvidia-smi)", f"{est.per_gpu_gib:.2f}"),
        ("required to fit: allocated + CUDA context + NCCL", f"{est.required / GIB:.2f}")]
    print_table(title + f" at the {est.peak_phase}", ["part", "GiB"], rows)
    fit = {g.name: est.fit_gib(g) for g in gpus}
    print_table("Fits: required <= usable (device memory less the headroom kept free; the allocator's cache "
                "is freed under pressure)",
                ["GPU", "datasheet GB", "device GiB", "headroom GiB", "usable GiB", "required GiB", "fits", "spare GiB"],
                [(g.name, f"{g.memory_gib:g}", f"{fit[g.name]['device']:.2f}", f"{fit[g.name]['headroom']:.2f}",
                  f"{fit[g.name]['usable']:.2f}", f"{fit[g.name]['required']:.2f}", "yes" if est.fits(g) else "no",
                  f"{fit[g.name]['spare']:+.1f}") for g in gpus])
    for line in _simulated_fit_lines(extra, est, gpus):
        print(line)
    if extra.get("allocator", {}).get("caveat"):
        print(f"reserved: {extra['allocator']['lengths']}; {extra['allocator']['caveat']}")
    if levers:
        print_table(f"How to make it fit (each change alone; required now {est.required / GIB:.2f} GiB; a ZeRO-3 "
                    "row names the GPUs that fit first at its width)",
                    ["change", "required GiB", "then fits", "what it costs"],
                    [(lv.name, f"{lv.required_gib:.2f}", ", ".join(lv.fits) or "none of these", lv.cost)
                     for lv in levers])
    print_assumptions(assumptions)
    return 0


def _simulated_fit_lines(extra: dict, est, gpus) -> list[str]:
    """Where the simulated allocator's run (--method trace, one GPU) disagrees with the fit rule, one line per GPU."""
    runs = extra.get("allocator", {}).get("runs", {})
    out = []
    for g in gpus:
        run = runs.get(g.name)
        if run is None or run["fits"] == est.fits(g):
            continue
        why = ("fragmentation: the tensors fit, the free bytes are split over segments" if run.get("fragmentation")
               else "the tensors alone exceed it")
        step = "the build" if run["oom_step"] == 0 else f"step {run['oom_step']}"
        out.append(f"{g.name}: the simulated allocator " + (
            f"runs out of memory at {step} ({run['oom']}): {why}; the fit rule says it fits" if not run["fits"] else
            f"runs within its {run['capacity_gib']:.2f} GiB although the fit rule's headroom says no"))
    return out
