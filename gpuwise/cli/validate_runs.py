"""`gpuwise validate runs PATH`: predictions against a run's own measurements (measurements.csv)."""

from __future__ import annotations

import argparse

from gpuwise.cli.output import pct

ASSUMPTIONS = [
    ("predicted: the job's goodput object, uncalibrated (nothing in it fitted on these rows); calibrated: the "
     "median measured/predicted step-time factor of the job's earlier rows only (estimate.calibration)"),
    ("CPU rows: the slot workers' CPU step time against the GPU roofline of the slot's GPU type, which does not "
     "model CPU workers: their error is not an accuracy of the GPU model"),
    "peak memory: torch.cuda.max_memory_reserved against the predicted reserved peak, CUDA rows only",
]



def _num(v, fmt: str = ".4g") -> str:
    return "" if v is None else format(v, fmt)


def run(args: argparse.Namespace) -> int:
    from gpuwise.errors import InputError
    from gpuwise.validation.runs import load_runs, rel_error, summarise

    if not args.path:
        raise InputError("PATH", None, "give a run's measurements.csv: gpuwise validate runs STATE_DIR/measurements.csv")
    rows = load_runs(args.path)
    groups = summarise(rows)
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json({"source": str(args.path), "rows": [{**r.__dict__, "cuda": r.cuda,
                   "step_error": rel_error(r.predicted_step_s, r.measured_step_s),
                   "calibrated_step_error": rel_error(r.calibrated_step_s, r.measured_step_s),
                   "peak_error": rel_error(r.predicted_peak_gib, r.measured_peak_gib)} for r in rows],
                   "groups": groups, "assumptions": ASSUMPTIONS})
        return 0
    from gpuwise.cli.output import print_assumptions, print_table

    print_table(f"Predicted vs measured per chunk ({args.path})",
                ["job", "model", "device", "GPU type", "GPUs", "batch", "steps", "pred s", "meas s", "|err|",
                 "calib s", "|err|", "pred GiB", "meas GiB", "|err|"],
                [(r.job, r.model, r.device or "?", r.gpu_type, r.gpus, r.batch, r.steps, _num(r.predicted_step_s),
                  _num(r.measured_step_s), pct(rel_error(r.predicted_step_s, r.measured_step_s)),
                  _num(r.calibrated_step_s), pct(rel_error(r.calibrated_step_s, r.measured_step_s)),
                  _num(r.predicted_peak_gib, ".3f"), _num(r.measured_peak_gib, ".3f"),
                  pct(rel_error(r.predicted_peak_gib, r.measured_peak_gib))) for r in rows])
    print_table("Median / max |error| by group", ["group", "rows", "median |err|", "max |err|"],
                [(g["group"], g["rows"], pct(g["median_abs_error"]), pct(g["max_abs_error"])) for g in groups],
                justify=["left", "right", "right", "right"])
    if not any("CUDA" in g["group"] for g in groups):
        print("No CUDA rows: no GPU step time or peak memory was measured, so nothing here validates the GPU model.")
    print_assumptions(ASSUMPTIONS)
    return 0
