"""`gpuwise memory MODEL ... --method trace`: a traced training step's tensors at the peak, as a
MemoryEstimate (the overhead model adds what tensors don't show, as for the analytic method)."""

from __future__ import annotations

import argparse
import sys

# the trace's categories -> the parts of MemoryEstimate (collective buffers are transient: temporaries)
PARTS = {"parameters": ("param",), "gradients": ("grad",), "optimizer": ("optimizer",),
         "activations": ("activation",), "temporaries": ("temporary", "other")}


def _need_torch() -> None:
    from gpuwise.errors import InputError

    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("method", "trace", "needs PyTorch: pip install 'gpuwise[trace]'") from None


def _trace(spec, cfg, schedule: str, quiet: bool):
    from gpuwise.trace import trace_memory

    if quiet or not sys.stdout.isatty():
        return trace_memory(spec, cfg, pp_schedule=schedule)
    from rich.console import Console

    with Console().status(f"tracing a training step of {spec.name} under FakeTensorMode ..."):
        return trace_memory(spec, cfg, pp_schedule=schedule)


def traced_estimate(args: argparse.Namespace, spec, cfg):
    """(MemoryEstimate of the traced peak, the trace's own JSON keys)."""
    from gpuwise.estimate.lora import adapter_params
    from gpuwise.estimate.memory import estimate_from_parts
    from gpuwise.estimate.overhead import describe
    from gpuwise.workload.models import param_count

    _need_torch()
    sim = _simulate(args, spec, cfg)      # first: a refused --lengths answers before the (longer) trace
    res = _trace(spec, cfg, args.pp_schedule, args.json)
    from gpuwise.trace import reserved
    got = res.breakdown()
    parts = {part: sum(got[c] for c in cats) for part, cats in PARTS.items()}
    params = param_count(spec)
    trainable = adapter_params(spec, cfg.lora_rank, cfg.lora_targets) if cfg.lora_rank > 0 else params
    notes = (*res.assumptions, describe() + " (added to the traced tensors, as in the analytic method"
             + ("; the allocator slack simulated instead: next line)" if sim else ")"),
             *((reserved.describe(sim),) if sim else ()),
             f"method: {res.method}; traced in {res.trace_s:.1f} s wall, {res.cpu_s:.1f} s CPU")
    stage = cfg.plan.pp - 1 if res.peak_stage == "last" else 0
    slack = sim.stats.peak_reserved - sim.stats.peak_allocated if sim else None
    est = estimate_from_parts(parts, cfg, params, trainable, notes, "step peak", stage, allocator=slack)
    extra = {"method": "trace", "trace_method": res.method, "peak_allocated_bytes": int(res.peak_allocated_bytes),
             "breakdown_bytes": {k: int(v) for k, v in got.items()},
             "trace_s": round(res.trace_s, 2), "cpu_s": round(res.cpu_s, 2),
             "allocator": _allocator_json(sim, cfg)}
    return est, extra


def _simulate(args: argparse.Namespace, spec, cfg):
    """The simulated allocator run (gpuwise.trace.reserved) where it applies, else None (`--lengths` refused)."""
    from gpuwise.errors import InputError
    from gpuwise.trace import reserved

    text = getattr(args, "lengths", None)
    why = reserved.simulation_refusal(cfg)
    if why:
        if text:
            raise InputError("lengths", text, f"the allocator is simulated on one GPU only ({why}); drop --lengths")
        return None
    dist = reserved.parse_lengths(text or "fixed", cfg.seq_len)
    if args.json or not sys.stdout.isatty():
        return reserved.simulate_reserved(spec, cfg, dist)
    from rich.console import Console

    with Console().status(f"replaying {spec.name}'s allocations through the caching allocator ..."):
        return reserved.simulate_reserved(spec, cfg, dist)


def _allocator_json(sim, cfg) -> dict:
    from gpuwise.trace import reserved

    if sim is None:
        return {"method": "fitted fraction (estimate/overhead.py)", "why": reserved.simulation_refusal(cfg)}
    st = sim.stats
    return {"method": "simulated", "lengths": sim.lengths.describe(), "steps": sim.steps, "growing": sim.growing,
            "segments": st.segments, "reserved_gib": round(st.peak_reserved / 2 ** 30, 4),
            "allocated_gib": round(st.peak_allocated / 2 ** 30, 4)}
