"""`gpuwise validate gpu`: the model against real training steps measured on a lent GPU."""

from __future__ import annotations

import argparse

QUANTITIES = ("allocated", "reserved", "tokens_per_s")
ASSUMPTIONS = [
    ("measured: one GPU, random weights, four steps of a plain PyTorch loop (gpuwise.nn models, foreach AdamW), "
     "max_memory_allocated / max_memory_reserved of the last step and the median step time "
     "(python -m gpuwise.validation.gpu_measure; scripts/gpu_session.sh)"),
    ("grid: the first run's configurations, looked at while this session changed the model (the optimizer_impl "
     "lever, the harness's leak fix); check: chosen before those changes and scored after them (held out)"),
    ("predicted: today's estimate_memory and step time for the same configuration; the one-GPU allocator-slack "
     "fraction is fitted on the grid's measured reserved / allocated ratios (grid reserved errors: in-sample; "
     "leave-one-source-out in `gpuwise validate memory`); nothing is fitted on the check rows"),
    "rows with a caveat: the harness runs that lever otherwise than the model describes; the headline lists them apart",
]


def _pct(v) -> str:
    return "" if v is None else f"{100 * v:+.1f}%"


def run(args: argparse.Namespace) -> int:
    from gpuwise.validation.gpu_runs import SETS, compare, runtime_rows, summary

    rows = [r for s in SETS for r in compare(s)]
    runtime = runtime_rows()
    table = [{"set": s, "quantity": q, "caveat_rows": "without" if skip else "with",
              **summary([r for r in rows if r.set == s], q, skip_caveats=skip)}
             for s in SETS for q in QUANTITIES for skip in (True, False)]
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"rows": [{**{k: v for k, v in r.__dict__.items()}, "errors": r.errors} for r in rows],
                   "summary": table, "runtime": [{**r.__dict__, "error": r.error} for r in runtime],
                   "assumptions": ASSUMPTIONS})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    print_table("Predicted vs measured on a real GPU (gpuwise/data/measured/gpu/)",
                ["set", "device", "model", "mb", "seq", "recompute", "LoRA", "levers", "alloc GiB", "err",
                 "reserved GiB", "err", "tokens/s", "err", "caveat"],
                [(r.set, r.device, r.model, r.entry[1], r.entry[2], r.entry[4], r.entry[5] or "",
                  r.entry[7] or (r.entry[6] or ""), f"{r.measured_allocated_gib:.1f}", _pct(r.errors["allocated"]),
                  f"{r.measured_reserved_gib:.1f}", _pct(r.errors["reserved"]), f"{r.measured_tokens_per_s:.0f}",
                  _pct(r.errors["tokens_per_s"]), "yes" if r.caveat else "") for r in rows])
    print_table("Median / max |error| (most optimistic: memory under- or tokens/s over-predicted)",
                ["set", "quantity", "caveat rows", "rows", "median |err|", "max |err|", "most optimistic"],
                [(t["set"], t["quantity"], t["caveat_rows"], t["rows"], _pct(t.get("median_abs_error")).lstrip("+"),
                  _pct(t.get("max_abs_error")).lstrip("+"), _pct(t.get("most_optimistic"))) for t in table])
    print_table("The runtime's steps on the same GPU (gpu/runtime_h200_smoke.csv; built-in models, median of the "
                "measured chunks; today's model uncalibrated)",
                ["job", "model", "GPU", "gpus", "batch", "chunks", "measured s", "recorded then s", "today s", "err"],
                [(r.job, r.model, r.gpu_type, r.gpus, r.batch, r.steps, f"{r.measured_step_s:.4g}",
                  "" if r.recorded_step_s is None else f"{r.recorded_step_s:.3g}",
                  "" if r.today_step_s is None else f"{r.today_step_s:.3g}", _pct(r.error)) for r in runtime])
    for c in sorted({r.caveat for r in rows if r.caveat}):
        print(f"caveat: {c}")
    print_assumptions(ASSUMPTIONS)
    return 0
