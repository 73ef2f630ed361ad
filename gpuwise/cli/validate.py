"""`gpuwise validate WHAT`: estimators against measured data (one module per WHAT)."""

from __future__ import annotations

import argparse
import importlib

TARGETS = {
    "memory": "validate_memory",          # memory estimator vs measured peak memory
    "throughput": "validate_throughput",  # fitted + analytical step-time models vs measurements
    "runs": "validate_runs",              # the goodput object vs a run's measurements.csv
    "gpu": "validate_gpu",                # memory and step time vs real steps measured on a lent GPU
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=sorted(TARGETS), help="which estimator to validate")
    parser.add_argument("path", nargs="?", default=None, metavar="PATH",
                        help="runs only: a run's measurements.csv (or its state folder)")
    parser.add_argument("--against", choices=("measured", "trace"), default="measured",
                        help="memory only: the bundled measured rows (default) or the traced grid")
    parser.add_argument("--grid", default=None, metavar="CSV",
                        help="memory --against trace: grid CSV (default gpuwise/data/traced/memory_grid.csv)")
    parser.add_argument("--simulate-allocator", action="store_true",
                        help="gpu and memory: also predict each row's reserved peak by replaying its traced "
                             "allocations through PyTorch's caching-allocator rules (gpu: the H200 rows; memory: "
                             "a table of the 20 ms-swift Dec-2023 rows and universal-llm-trainer's 21 one-GPU rows, "
                             "not in the headline; gpu: 3-4 min, memory: about 20 min on a 2-core host, the 4 "
                             "lognormal rows minutes each)")
    parser.add_argument("--model", default=None, metavar="NAME",
                        help="gpu only: only the measured rows of this model")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from gpuwise.errors import InputError

    if getattr(args, "model", None) and args.what != "gpu":
        raise InputError("model", args.model, f"--model selects rows of `validate gpu` only; drop it for {args.what}")
    if getattr(args, "simulate_allocator", False) and (args.what not in ("gpu", "memory")
                                                        or getattr(args, "against", "measured") != "measured"):
        raise InputError("simulate-allocator", True, "applies to `validate gpu` and `validate memory` (measured rows); "
                         "drop it here")
    return importlib.import_module(f"gpuwise.cli.{TARGETS[args.what]}").run(args)
