"""`gpuwise simulate`: one scheduling policy on a cluster and a job stream."""

from __future__ import annotations

import argparse

def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="CLUSTER.yaml",
                        help="cluster spec (default: the Pollux testbed, 16 nodes x 4 T4)")
    parser.add_argument("--workload", required=True, metavar="FILE",
                        help="job stream: Pollux workload CSV, Philly CSV, or gpuwise CSV/YAML")
    parser.add_argument("--load", type=float, default=1.0, metavar="FACTOR",
                        help="what-if arrival rate: every arrival time divided by FACTOR (default 1: as "
                             "in the file; 4 = the same jobs arriving 4x as fast)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables (every job in per_job)")
    parser.add_argument("--show-jobs", type=int, default=10, metavar="N",
                        help="per-job table (wait, run, GPUs, JCT) of the first N jobs to arrive (default 10; 0: none)")
    parser.add_argument("--plot", metavar="DIR", help="write JCT CDF, GPUs-in-use and queue plots here")
    parser.add_argument("--seed", type=int, default=0, help="seed of the speed noise (default 0)")
    parser.add_argument("--admission", choices=("queue", "drop"), default=None,
                        help="elastic-dp policies: drop or queue jobs that do not fit (default drop)")
    parser.add_argument("--objective", choices=("job", "remaining", "request", "speedup"), default=None,
                        help="elastic-dp policies: what V_j(g) measures -- job (fraction of the job per "
                             "hour, default), remaining (of its remaining work: SRPT-like), request "
                             "(speed vs its own request), speedup (vs its best single GPU, or the fewest GPUs "
                             "it runs on)")
    parser.add_argument("--restart-s", type=float, default=30.0,
                        help="seconds a job loses per start/rescale (default 30, Pollux's simulator)")
    parser.add_argument("--policy-model", choices=("oracle", "fitted"), default="oracle",
                        help="speed model the policies see: the measured truth (default) or the shared "
                             "JobModel fitted on the profiles")
    parser.add_argument("--speed-noise", type=float, default=0.0,
                        help="sigma of a per-job log-normal error of the true speed vs the policies' "
                             "model (default 0: policies see the truth)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuwise.policies.registry import POLICIES  # the names --help lists are the names make_policy takes

    add_common(parser)
    parser.add_argument("--policy", required=True, action="append",
                        help="the policy (once; gpuwise compare runs several), one of: " + ", ".join(POLICIES))


def check_plot_dir(flag: str, path: str | None) -> None:
    """Refuse a plot folder before simulating (runs can take minutes): an existing file, a name that
    looks like an image file, or a place where the folder cannot be created."""
    import os
    from pathlib import Path

    from gpuwise.errors import InputError

    if not path:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(flag, path, "is a file; give a folder for the plots (created if missing)")
    if not p.exists() and p.suffix.lower() in (".png", ".svg", ".pdf", ".jpg"):
        raise InputError(flag, path, "give a folder, not an image file name: three plots are written into it")
    base = p.resolve()
    while not base.exists():  # the folders that exist above it must let us create the rest
        base = base.parent
    if not base.is_dir():
        raise InputError(flag, path, f"{base} is a file, so the folder cannot be created; write elsewhere")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(flag, path, f"folder {base} is not writable; write elsewhere")


def load_inputs(args):
    from gpuwise.errors import InputError
    from gpuwise.hardware.cluster import load_cluster, pollux_cluster
    from gpuwise.workload.traces import load_workload
    from gpuwise.workload.transforms import at_load

    import math

    if not math.isfinite(args.restart_s) or args.restart_s < 0:
        raise InputError("--restart-s", args.restart_s, "give seconds >= 0")
    if not math.isfinite(args.speed_noise) or args.speed_noise < 0:
        raise InputError("--speed-noise", args.speed_noise, "give a sigma >= 0")
    if getattr(args, "show_jobs", 0) < 0:   # library callers (tests) may build args without it
        raise InputError("--show-jobs", args.show_jobs, "give a number of jobs >= 0 (0: no per-job table)")
    check_plot_dir("--plot", args.plot)
    cluster = load_cluster(args.cluster) if args.cluster else pollux_cluster()
    return cluster, at_load(load_workload(args.workload), args.load)


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.output import emit_json, print_assumptions, print_table
    from gpuwise.cli.sim_report import metric_rows, print_jobs
    from gpuwise.errors import InputError

    if len(args.policy) > 1:  # argparse would keep only the last one: a silent wrong answer
        raise InputError("--policy", " ".join(args.policy),
                         "simulate runs one policy; use gpuwise compare --policy A --policy B to run several")
    args.policy = args.policy[0]
    cluster, workload = load_inputs(args)
    from gpuwise.cli.progress import progress, wanted

    with progress(f"simulating {args.policy} on {len(workload):,} jobs", None, enabled=wanted(args)):
        metrics, series = simulate_policy(cluster, workload, args.policy, args)
    metrics = {"workload": workload.source, "workload_format": workload.format, **metrics}
    metrics["assumptions"].append(metrics["fairness"]["definition"])
    if args.plot:
        from gpuwise.sim.plots import write_plots

        metrics["plots"] = write_plots({args.policy: series}, args.plot,
                                       None if cluster.unbounded else cluster.total_gpus)
    if args.json:
        emit_json(metrics)
        return 0
    print(f"{args.policy} on {cluster.name} ({cluster.describe()}), {len(workload)} jobs from {workload.source}")
    print_table("simulated metrics", ["metric", args.policy], metric_rows({args.policy: metrics}))
    from gpuwise.sim.metrics import solver_line

    if solver_line(args.policy, metrics["solver"]):
        print(solver_line(args.policy, metrics["solver"]))
    print_jobs(args.policy, metrics["per_job"], args.show_jobs)
    print_assumptions(metrics["assumptions"])
    for f in metrics.get("plots", []):
        print(f"wrote {f}")
    return 0


def simulate_policy(cluster, workload, name: str, args) -> tuple[dict, dict]:
    """Run one policy; returns (metrics, series for plots)."""
    from gpuwise.policies.registry import make_policy
    from gpuwise.sim.cluster import simulate
    from gpuwise.sim.metrics import series, summarise

    policy = make_policy(name, admission=args.admission, objective=args.objective)
    res = simulate(cluster, workload, policy, restart_s=args.restart_s, seed=args.seed,
                   speed_noise=args.speed_noise, policy_model=args.policy_model)
    return summarise(res), series(res)
