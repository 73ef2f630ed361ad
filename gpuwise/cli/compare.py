"""`gpuwise compare`: several scheduling policies side by side on one cluster and job stream."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuwise.cli.simulate import add_common
    from gpuwise.policies.registry import POLICIES

    add_common(parser)
    parser.add_argument("--policy", action="append", required=True,
                        help="a policy to compare (repeat the flag), or all: " + ", ".join(POLICIES))


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.output import emit_json, print_assumptions, print_table
    from gpuwise.cli.sim_report import metric_rows, print_jobs
    from gpuwise.cli.simulate import load_inputs, simulate_policy
    from gpuwise.policies.registry import make_policy

    from gpuwise.policies.registry import POLICIES

    names = list(dict.fromkeys(n for p in args.policy for n in (POLICIES if p == "all" else [p])))
    for n in names:
        make_policy(n)  # validate every name before the first (possibly long) run
    cluster, workload = load_inputs(args)
    metrics, series = {}, {}
    from gpuwise.cli.progress import progress, wanted

    with progress(f"simulating {len(workload):,} jobs", len(names), enabled=wanted(args)) as bar:
        for n in names:
            bar.advance(0, f"simulating {n} on {len(workload):,} jobs")
            metrics[n], series[n] = simulate_policy(cluster, workload, n, args)
            bar.advance()
    from gpuwise.sim.metrics import common_jct

    n_common, mean_common = common_jct({n: series[n]["jct_by_job"] for n in names})
    for n in names:  # like-for-like: drop admission lets policies complete different jobs
        metrics[n]["jobs_completed_by_all"] = n_common
        metrics[n]["mean_jct_common_s"] = mean_common[n]
    shared: list[str] = []
    for m in metrics.values():
        for a in m["assumptions"] + [m["fairness"]["definition"]]:
            if a not in shared:
                shared.append(a)
    out = {"cluster": cluster.name, "cluster_gpus": None if cluster.unbounded else cluster.total_gpus, "workload": workload.source,
           "workload_format": workload.format, "jobs": len(workload), "seed": args.seed,
           "policies": metrics, "assumptions": shared}
    if args.plot:
        from gpuwise.sim.plots import write_plots

        out["plots"] = write_plots(series, args.plot, None if cluster.unbounded else cluster.total_gpus)
    if args.json:
        emit_json(out)
        return 0
    print(f"{cluster.name} ({cluster.describe()}), {len(workload)} jobs from {workload.source}")
    common = ("mean_jct_common_s", f"mean JCT, {n_common} jobs all completed (h)", "h")
    print_table("simulated metrics per policy", ["metric", *names], metric_rows(metrics, (common,)))
    from gpuwise.sim.metrics import solver_line

    for line in filter(None, (solver_line(n, metrics[n]["solver"]) for n in names)):
        print(line)
    for n in names:
        print_jobs(n, metrics[n]["per_job"], args.show_jobs)
    print_assumptions(shared)
    for f in out.get("plots", []):
        print(f"wrote {f}")
    return 0
