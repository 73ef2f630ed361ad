"""`gpuwise memory MODEL ...`: per-GPU peak training memory, its breakdown, and which GPUs hold it."""

from __future__ import annotations

import argparse

from gpuwise.cli.memory_flags import add_training_flags, config_dict, gpus_from, training_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_flags(parser, plan_flags=True)


def run(args: argparse.Namespace) -> int:
    from gpuwise.estimate.performance import job_performance
    from gpuwise.workload.models import load_model

    spec = load_model(args.model)
    cfg = training_config(args, spec)
    gpus = gpus_from(args)
    est = job_performance(spec, cfg, None).memory
    fits = {g.name: est.fits(g) for g in gpus}
    assumptions = list(est.assumptions) + [
        f"{g.name}: {g.memory_gib:g} GiB usable, {'fits' if fits[g.name] else 'does not fit'} "
        f"({est.headroom_gib(g):+.1f} GiB)" for g in gpus]
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"model": spec.name, "params": est.params, "trainable_params": est.trainable_params,
                   "config": config_dict(cfg), "per_gpu_gib": round(est.per_gpu_gib, 4),
                   "breakdown_gib": {k: round(v, 4) for k, v in est.breakdown_gib().items()},
                   "peak_stage": est.peak_stage, "fits": fits,
                   "headroom_gib": {g.name: round(est.headroom_gib(g), 3) for g in gpus},
                   "assumptions": assumptions})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    p = cfg.plan
    shape = (f"{cfg.micro_batch} x {cfg.seq_len} tokens" if spec.is_transformer
             else f"{cfg.micro_batch} {spec.sample_unit}(s)")
    print(f"{spec.name}: {est.params / 1e9:.3g}B params ({est.trainable_params / 1e9:.3g}B trainable); "
          f"{p.label()} on {p.gpus} GPU(s); micro-batch {shape}; "
          f"{cfg.precision}, {cfg.optimizer}, recompute {cfg.recompute}")
    title = "Per-GPU peak memory" + (f" (pipeline stage {est.peak_stage})" if p.pp > 1 else "")
    rows = [(k, f"{v:.2f}") for k, v in est.breakdown_gib().items()] + [("total per GPU", f"{est.per_gpu_gib:.2f}")]
    print_table(title, ["part", "GiB"], rows)
    print_table("Fits", ["GPU", "memory GiB", "fits", "headroom GiB"],
                [(g.name, f"{g.memory_gib:g}", "yes" if fits[g.name] else "no", f"{est.headroom_gib(g):+.1f}")
                 for g in gpus])
    print_assumptions(est.assumptions)
    return 0
