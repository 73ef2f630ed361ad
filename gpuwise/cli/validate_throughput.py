"""`gpuwise validate throughput [--json]`: step-time models against measured data.

- Fitted (Pollux) model: per bundled Pollux application, fit on <= 10 points an online system would
  have measured first, score every other profiled placement (median and max error).
- Analytical model: Korthikanti et al. 2022 Megatron iteration times; Gavel single-GPU throughput,
  cross-GPU ratios and 1->8 GPU scaling.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:  # used when called directly
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.output import emit_json, print_assumptions, print_table
    from gpuwise.validation.throughput import (HEADLINE_SOURCES, gavel_comparisons, korthikanti_comparisons,
                                               score_all_pollux, summarize)

    fits = score_all_pollux(10)
    comps = korthikanti_comparisons() + gavel_comparisons()
    summary = summarize(comps)
    fitted_median = sorted(f.median_error for f in fits)
    assumptions = [
        "fitted: Pollux 7-parameter model per application on <= 10 points (1 GPU at 3 batches, 2 and 4 GPUs on one "
        "node, 1-GPU-per-node on 2-4 nodes, one 2x4 placement); scored on every other row of placements.csv; "
        "scalability.csv (6-64 GPUs) is pure extrapolation",
        "analytical: Ampere efficiency and the GEMM width factor were fitted on the 8 Korthikanti points and the "
        "Volta/Pascal/Kepler fp32 efficiencies on Gavel's ResNet-50 single-GPU points (in-sample); ResNet-18 "
        "cross-GPU ratios and all multi-GPU scaling points are out of sample",
        "floor: the same model fitted on all rows of an application (in-sample) -- its error is the limit of the "
        "7-parameter form on these profiles (placements with the same GPUs per node in another order differ by "
        "up to 30%; 2-node placements are slower than 3-4-node ones)",
        "missed regimes: Gavel multi-GPU runs at small per-GPU batch lose 30-70% (host/input-pipeline contention, "
        "not modelled); Gavel job types without a gpuwise preset (LSTM LM, recommendation, A3C, CycleGAN) are "
        "memory/latency-bound, so a FLOPS-rate ratio misses them (reported apart, not in the headline)",
    ]
    out = {
        "fitted": {"applications": [f.__dict__ for f in fits],
                   "median_of_medians": float(fitted_median[len(fitted_median) // 2]),
                   "apps_within_5pct": sum(1 for f in fits if f.median_error <= 0.05)},
        "analytical": {"summary": summary, "headline_sources": list(HEADLINE_SOURCES),
                       "median_error": summary["all"]["median_error"],
                       "comparisons": [{"source": c.source, "case": c.case, "measured": c.measured,
                                        "predicted": c.predicted, "error": c.error} for c in comps]},
        "assumptions": assumptions,
    }
    if getattr(args, "json", False):
        emit_json(out)
        return 0
    print_table("Fitted step-time model on Pollux profiles (fit <= 10 points, score the rest)",
                ["application", "train", "held-out", "median err", "max err", "scalability median",
                 "floor (fit on all)"],
                [(f.app, f.train_points, f.heldout_points, f"{f.median_error:.1%}", f"{f.max_error:.1%}",
                  f"{f.scalability_median_error:.1%}", f"{f.floor_median_error:.1%}") for f in fits])
    print(f"fitted: {out['fitted']['apps_within_5pct']} of {len(fits)} applications within the 5% median target")
    print_table("Analytical step-time model vs measurements", ["source", "points", "median err", "max err"],
                [(k, v["points"], f"{v['median_error']:.1%}", f"{v['max_error']:.1%}") for k, v in summary.items()])
    print(f"analytical median error (headline sources): {summary['all']['median_error']:.1%}")
    print_assumptions(assumptions)
    return 0
