"""`gpuwise memory MODEL ... --method trace`: render a traced training step's peak memory."""

from __future__ import annotations

import argparse
import sys

GIB = 2 ** 30


def _trace(spec, cfg, schedule: str, quiet: bool):
    from gpuwise.errors import InputError

    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("method", "trace", "needs PyTorch: pip install 'gpuwise[trace]'") from None
    from gpuwise.trace import trace_memory

    if quiet or not sys.stdout.isatty():
        return trace_memory(spec, cfg, pp_schedule=schedule)
    from rich.console import Console

    with Console().status(f"tracing a training step of {spec.name} under FakeTensorMode ..."):
        return trace_memory(spec, cfg, pp_schedule=schedule)


def run_trace(args: argparse.Namespace, spec, cfg, gpus) -> int:
    from gpuwise.cli.memory_flags import config_dict
    from gpuwise.workload.models import param_count

    res = _trace(spec, cfg, args.pp_schedule, args.json)
    peak = res.peak_allocated_bytes
    fits = {g.name: peak <= g.memory_gib * GIB for g in gpus}
    assumptions = list(res.assumptions) + [f"method: {res.method}; traced in {res.trace_s:.1f} s wall, "
                                           f"{res.cpu_s:.1f} s CPU"]
    assumptions += [f"{g.name}: {g.memory_gib:g} GiB usable, {'fits' if fits[g.name] else 'does not fit'} "
                    f"({g.memory_gib - peak / GIB:+.1f} GiB, tensors only)" for g in gpus]
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"model": spec.name, "params": param_count(spec), "config": config_dict(cfg), "method": res.method,
                   "per_gpu_gib": round(peak / GIB, 4), "peak_allocated_bytes": int(peak),
                   "breakdown_bytes": {k: int(v) for k, v in res.breakdown().items()},
                   "breakdown_gib": {k: round(v / GIB, 4) for k, v in res.breakdown().items()},
                   "peak_stage": res.peak_stage, "trace_s": round(res.trace_s, 2), "cpu_s": round(res.cpu_s, 2),
                   "fits": fits, "assumptions": assumptions})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    p = cfg.plan
    print(f"{spec.name}: traced; {p.label()} on {p.gpus} GPU(s); micro-batch {cfg.micro_batch} x {cfg.seq_len} tokens; "
          f"{cfg.precision}, {cfg.optimizer}, recompute {cfg.recompute}")
    rows = [(k, f"{v / GIB:.2f}") for k, v in res.breakdown().items()] + [("peak allocated", f"{peak / GIB:.2f}")]
    title = "Per-GPU traced peak" + (f" ({res.peak_stage} pipeline stage)" if p.pp > 1 else "")
    print_table(title, ["part", "GiB"], rows)
    print_table("Fits", ["GPU", "memory GiB", "fits", "headroom GiB"],
                [(g.name, f"{g.memory_gib:g}", "yes" if fits[g.name] else "no", f"{g.memory_gib - peak / GIB:+.1f}")
                 for g in gpus])
    print_assumptions(assumptions)
    return 0
