"""`gpuwise validate gpu`: the model against real training steps measured on a lent GPU."""

from __future__ import annotations

import argparse

from gpuwise.cli.output import pct

from gpuwise.errors import InputError

ASSUMPTIONS = [
    ("measured: one GPU, random weights, four steps of a plain PyTorch loop (gpuwise.nn models, foreach AdamW), "
     "max_memory_allocated / max_memory_reserved of the last step and the median step time "
     "(python -m gpuwise.validation.gpu_measure; scripts/gpu_session.sh)"),
    ("grid: the first run's configurations, looked at while this session changed the model (the optimizer_impl "
     "lever, the harness's leak fix); check: chosen before those changes and scored after them (held out)"),
    ("predicted: today's estimate_memory and step time for the same configuration; the one-GPU allocator-slack "
     "fraction is fitted on the grid's measured reserved / allocated ratios (grid reserved errors: in-sample; "
     "leave-one-source-out in `gpuwise validate memory`); nothing is fitted on the check rows"),
    ("reserved (simulated allocator), with --simulate-allocator: the harness's configuration traced (gpuwise.nn "
     "build and steps under FakeTensorMode) and replayed through PyTorch's caching-allocator rules at the default "
     "PYTORCH_CUDA_ALLOC_CONF (gpuwise.trace.reserved); nothing fitted on any row (both sets seen while it was written); "
     "rows the trace refuses (compile, activation offload) say 'not simulated'"),
    "rows with a caveat: the harness runs that lever otherwise than the model describes; the headline lists them apart",
]
SIM_HINT = ("add --simulate-allocator for 'reserved (simulated allocator)': each row's reserved peak from its "
            "traced allocations replayed through PyTorch's caching-allocator rules (nothing fitted; 3-4 min for all rows on a 2-core host)")



def _simulated_gib(r) -> str:
    if r.simulated_reserved_gib is None:
        return "-" if r.simulation_note else ""
    return f"{r.simulated_reserved_gib:.2f}" + (" (growing)" if "growing" in r.simulation_note else "")


def _rows(args: argparse.Namespace) -> list:
    from gpuwise.cli.progress import progress, wanted
    from gpuwise.validation.gpu_runs import SETS, compare, with_simulation

    rows = [r for s in SETS for r in compare(s)]
    if args.model:
        models = sorted({r.model for r in rows})
        rows = [r for r in rows if r.model == args.model]
        if not rows:
            raise InputError("model", args.model, "use a measured model: " + ", ".join(models))
    if args.simulate_allocator:
        with progress("simulating the caching allocator", len(rows), enabled=wanted(args)) as bar:
            rows = with_simulation(rows, on_progress=bar.callback)
    return rows


def run(args: argparse.Namespace) -> int:
    from gpuwise.validation.gpu_runs import runtime_rows, summary_table

    rows = _rows(args)
    runtime = runtime_rows()
    table = summary_table(rows, args.simulate_allocator)
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"rows": [{**{k: v for k, v in r.__dict__.items()}, "errors": r.errors} for r in rows],
                   "summary": table, "runtime": [{**r.__dict__, "error": r.error} for r in runtime],
                   "simulated_allocator": bool(args.simulate_allocator), "assumptions": ASSUMPTIONS})
        return 0
    _render(rows, table, runtime, args.simulate_allocator)
    return 0


def _render(rows: list, table: list[dict], runtime: list, simulated: bool) -> None:
    from gpuwise.cli.output import print_assumptions, print_table
    from gpuwise.validation.gpu_runs import SIMULATED

    sim_cols = ["simulated GiB", "err (sim.)"] if simulated else []
    print_table("Predicted vs measured on a real GPU (gpuwise/data/measured/gpu/)",
                ["set", "device", "model", "mb", "seq", "recompute", "LoRA", "levers", "alloc GiB", "err",
                 "reserved GiB", "err (fitted)", *sim_cols, "tokens/s", "err", "caveat"],
                [(r.set, r.device, r.model, r.entry[1], r.entry[2], r.entry[4], r.entry[5] or "",
                  r.entry[7] or (r.entry[6] or ""), f"{r.measured_allocated_gib:.1f}",
                  pct(r.errors["allocated"], signed=True),
                  f"{r.measured_reserved_gib:.1f}", pct(r.errors["reserved"], signed=True),
                  *((_simulated_gib(r), pct(r.errors[SIMULATED], signed=True)) if simulated else ()),
                  "-" if r.measured_tokens_per_s is None else f"{r.measured_tokens_per_s:.0f}",
                  pct(r.errors["tokens_per_s"], signed=True), "yes" if r.caveat else "")
                 for r in rows])
    print_table("Median / max |error| (most optimistic: memory under- or tokens/s over-predicted)",
                ["set", "quantity", "sample", "caveat rows", "rows", "median |err|", "max |err|", "most optimistic"],
                [(t["set"], t["label"], t["sample"], t["caveat_rows"], t["rows"],
                  pct(t.get("median_abs_error")), pct(t.get("max_abs_error")),
                  pct(t.get("most_optimistic"), signed=True)) for t in table])
    print_table("The runtime's steps on the same GPU (gpu/runtime_h200_smoke.csv; built-in models, median of the "
                "measured chunks; today's model uncalibrated)",
                ["job", "model", "GPU", "gpus", "batch", "chunks", "measured s", "recorded then s", "today s", "err"],
                [(r.job, r.model, r.gpu_type, r.gpus, r.batch, r.steps, f"{r.measured_step_s:.4g}",
                  "" if r.recorded_step_s is None else f"{r.recorded_step_s:.3g}",
                  "" if r.today_step_s is None else f"{r.today_step_s:.3g}", pct(r.error, signed=True)) for r in runtime])
    for c in sorted({r.caveat for r in rows if r.caveat}):
        print(f"caveat: {c}")
    for r in rows:
        if r.simulation_note.startswith("not simulated"):
            print(f"{r.set} {r.model} {r.entry[7] or r.entry[6] or ''}: {r.simulation_note.split(';')[0]}")
    if not simulated:
        print(SIM_HINT)
    print_assumptions(ASSUMPTIONS)
