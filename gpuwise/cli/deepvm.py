"""`gpuwise deepvm`: DeepVM spot + on-demand cluster recommendation under an hourly budget."""

from __future__ import annotations

import argparse
import math


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--budget", type=float, default=3.0,
                        help="pricing willingness: most USD per hour to spend (default 3, as the paper)")
    parser.add_argument("--data", metavar="DIR", default=None,
                        help="directory with instances.csv, scaling_factor_params.csv, "
                             "network_saturation.csv, quotas.csv (default: bundled DeepVM AWS data)")
    parser.add_argument("--top", type=int, default=3, help="how many DeepVM configurations to list")
    parser.add_argument("--checkpoint-gb", type=float, default=0.2,
                        help="checkpoint size in GB (tiering remote RAM sizing; default 0.2)")
    parser.add_argument("--buffer-factor", type=float, default=0.5,
                        help="remote buffer size as a multiple of the checkpoint (default 0.5)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _check(args: argparse.Namespace) -> None:
    from gpuwise.errors import InputError

    if not (math.isfinite(args.budget) and 0 < args.budget <= 1e9):   # 1e308 overflowed node counts
        raise InputError("--budget", args.budget, "give a positive USD/hour amount up to 1e9, e.g. --budget 3")
    if args.top < 1:
        raise InputError("--top", args.top, "give at least 1")
    for flag, v in (("--checkpoint-gb", args.checkpoint_gb), ("--buffer-factor", args.buffer_factor)):
        if not (math.isfinite(v) and v > 0):
            raise InputError(flag, v, "give a positive number")


def run(args: argparse.Namespace) -> int:
    from gpuwise.plan.deepvm.data import load_deepvm
    from gpuwise.plan.deepvm.optimizer import min_budget, recommend

    _check(args)
    data = load_deepvm(args.data)
    res = recommend(data, args.budget, args.top, args.checkpoint_gb, args.buffer_factor)
    as_dict = lambda c: None if c is None else c.to_dict()  # noqa: E731
    out = {
        "budget_usd_per_hour": args.budget,
        "deepvm": [c.to_dict() for c in res.ranked],
        "deepvm_noscale": as_dict(res.noscale),
        "cost_first": as_dict(res.cost_first),
        "performance_first": as_dict(res.performance_first),
        "flopp_ranking": [{"instance": n, "flopp": f} for n, f in res.flopp_ranking],
        "feasible_configurations": res.feasible_count,
        "assumptions": res.assumptions,
    }
    if not res.ranked:
        need = min_budget(data, args.checkpoint_gb, args.buffer_factor)
        out["infeasible"] = {"binding": "budget", "min_budget_usd_per_hour": need}
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json(out)
        return _infeasible_exit(out)
    from gpuwise.cli.output import print_assumptions, print_table

    if not res.ranked:
        print(f"No configuration fits ${args.budget:g}/h; the cheapest DeepVM cluster costs "
              f"${out['infeasible']['min_budget_usd_per_hour']:.4f}/h (raise --budget).")
        print_assumptions(res.assumptions)
        return _infeasible_exit(out)

    def row(label: str, c) -> list:
        remote = f"{c.remote_nodes} x {c.remote_instance}" if c.remote_instance else "-"
        return [label, c.architecture, f"{c.gpu_nodes} x {c.gpu_instance}", c.spot_gpu_nodes,
                remote, f"{c.hourly_usd:.4f}", f"{c.scaling_factor:.4f}", f"{c.objective:.4g}"]

    rows = [row(f"DeepVM #{i + 1}", c) for i, c in enumerate(res.ranked)]
    for label, c in (("DeepVM-NoScale", res.noscale), ("Cost-First", res.cost_first),
                     ("Performance-First", res.performance_first)):
        if c is not None:
            rows.append(row(label, c))
    print_table(f"DeepVM at ${args.budget:g}/h ({res.feasible_count} feasible configurations)",
                ["policy", "architecture", "GPU VMs", "of which spot", "on-demand ckpt VMs", "$/h",
                 "SF(n)", "Z=FLOPP.n.SF"], rows)
    print("FLOPP ranking: " + ", ".join(f"{n} {f:.3g}" for n, f in res.flopp_ranking))
    print_assumptions(res.assumptions)
    return 0


def _infeasible_exit(out: dict) -> int:
    """1 (valid input, no feasible answer) when no cluster fits the budget; stderr names the minimum."""
    import sys

    if "infeasible" not in out:
        return 0
    sys.stderr.write(f"gpuwise deepvm: no feasible answer: budget binds; nearest feasible: --budget "
                     f"{out['infeasible']['min_budget_usd_per_hour']:.4f} (USD/h)\n")
    return 1
