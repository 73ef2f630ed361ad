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
    from gpuwise.estimate.memory import estimate_from_parts, stack_model
    from gpuwise.estimate.overhead import describe
    from gpuwise.workload.models import param_count, positions_note

    _need_torch()
    dist = _lengths(args, cfg)           # first: a refused --lengths answers before the (longer) trace
    res = _trace(spec, cfg, args.pp_schedule, args.json)
    sim, runs = _simulate(args, spec, cfg, dist) if dist else (None, [])
    from gpuwise.trace import reserved
    got = res.breakdown()
    parts = {part: sum(got[c] for c in cats) for part, cats in PARTS.items()}
    params = param_count(stack_model(spec, cfg))          # the model as the stack builds it, as the trace ran it
    trainable = adapter_params(spec, cfg.lora_rank, cfg.lora_targets, cfg.dora) if cfg.lora_rank > 0 else params
    notes = (*res.assumptions, *positions_note(spec), describe() + " (added to the traced tensors, as in the analytic method"
             + ("; the allocator slack simulated instead: next line)" if sim else ")"),
             *((reserved.describe(sim), _runs_note(runs)) if sim else ()),
             f"method: {res.method}; traced in {res.trace_s:.1f} s wall, {res.cpu_s:.1f} s CPU")
    stage = cfg.plan.pp - 1 if res.peak_stage == "last" else 0
    traced = sum(parts.values())
    slack = reserved.reported_reserved(traced, sim) - traced if sim else None     # beyond the traced tensors
    est = estimate_from_parts(parts, cfg, params, trainable, notes, "step peak", stage, allocator=slack)
    extra = {"method": "trace", "trace_method": res.method, "peak_allocated_bytes": int(res.peak_allocated_bytes),
             "breakdown_bytes": {k: int(v) for k, v in got.items()},
             "trace_s": round(res.trace_s, 2), "cpu_s": round(res.cpu_s, 2),
             "allocator": _allocator_json(sim, runs, cfg)}
    return est, extra


def _lengths(args: argparse.Namespace, cfg):
    """The micro-batch lengths to simulate the allocator at (gpuwise.trace.reserved), None where the simulation
    does not apply (`--lengths` refused there)."""
    from gpuwise.errors import InputError
    from gpuwise.trace import reserved

    text = getattr(args, "lengths", None)
    why = reserved.simulation_refusal(cfg)
    if why:
        if text:
            raise InputError("lengths", text, f"the allocator is simulated on one GPU only ({why}); drop --lengths")
        return None
    return reserved.parse_lengths(text or "fixed", cfg.seq_len)


def _simulate(args: argparse.Namespace, spec, cfg, dist):
    """(the simulated allocator run at `dist`, its replays at each GPU's capacity)."""
    from gpuwise.cli.memory_flags import gpus_from
    from gpuwise.trace import reserved

    caps = {g.name: reserved.capacity_bytes(g) for g in gpus_from(args)}
    if args.json or not sys.stdout.isatty():
        return reserved.simulate_on(spec, cfg, dist, caps)
    from rich.console import Console

    with Console().status(f"replaying {spec.name}'s allocations through the caching allocator ..."):
        return reserved.simulate_on(spec, cfg, dist, caps)


def _runs_note(runs) -> str:
    ok = [r.gpu for r in runs if r.oom is None]
    bad = [f"{r.gpu} (step {r.at_step}: {r.oom})" for r in runs if r.oom is not None]
    return ("simulated allocator at each GPU's capacity (device memory less the CUDA context; no headroom): runs on "
            + (", ".join(ok) or "none") + ("; out of memory on " + "; ".join(bad) if bad else ""))


def _allocator_json(sim, runs, cfg) -> dict:
    from gpuwise.trace import reserved

    if sim is None:
        return {"method": "fitted fraction (estimate/overhead.py)", "why": reserved.simulation_refusal(cfg)}
    st = sim.stats
    return {"method": "simulated", "lengths": sim.lengths.describe(), "steps": sim.steps, "growing": sim.growing,
            "caveat": None if sim.lengths.kind == "fixed" else reserved.VARYING_CAVEAT,
            "segments": st.segments, "reserved_gib": round(st.peak_reserved / 2 ** 30, 4),
            "allocated_gib": round(st.peak_allocated / 2 ** 30, 4),
            "runs": {r.gpu: {"capacity_gib": round(r.capacity / 2 ** 30, 4), "fits": r.oom is None,
                             "oom": str(r.oom) if r.oom else None, "oom_step": r.at_step if r.oom else None,
                             "fragmentation": r.oom.fragmentation if r.oom else None} for r in runs}}
