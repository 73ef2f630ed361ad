"""`gpuwise rent JOBS.yaml --budget B`: optimal rental widths for a stream of jobs under a
long-run GPU (or USD/h) budget, with curves, a cloud simulation and a finite-window spend bound."""

from __future__ import annotations

import argparse

MAX_JOBS = 10_000_000

_BILLING = {"exact": 0.0, "second": 1.0, "minute": 60.0, "hour": 3600.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jobs", metavar="JOBS.yaml", help="job types (see examples/rent/*.yaml)")
    parser.add_argument("--budget", help="long-run average budget: GPUs (e.g. 2) or USD per hour (e.g. 30usd/h); "
                                         "overrides the file's budget")
    parser.add_argument("--integer", action="store_true", help="whole-GPU widths (at most one type mixes two)")
    parser.add_argument("--sweep", metavar="LO:HI:STEP", help="solve for every budget in the range")
    parser.add_argument("--plot", metavar="FILE", help="plot widths and E[T] against the budget (PNG/PDF/SVG)")
    parser.add_argument("--simulate", action="store_true", help="simulate the policy and baselines on a cloud")
    parser.add_argument("--jobs", dest="n_jobs", type=int, default=None, metavar="N",
                        help="jobs to simulate (with --simulate; default 1e5)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed of the simulation")
    parser.add_argument("--no-baselines", action="store_true", help="simulate pi* only (with --simulate)")
    parser.add_argument("--simulator", choices=("cloud", "cluster"), default=None,
                        help="cloud: the fast specialised simulator (default); cluster: the same policies "
                             "through the scheduling policy interface in the cluster simulator on an "
                             "unbounded cluster (same numbers, ~40x slower; whole-GPU widths, boot delay only)")
    parser.add_argument("--boot-delay", type=float, default=0.0, metavar="SECONDS",
                        help="VM boot time per job, billed (default 0)")
    parser.add_argument("--billing", default="exact", metavar="GRANULARITY",
                        help="billing increment per rental: exact, second, minute, hour or seconds (default exact)")
    parser.add_argument("--min-charge", type=float, default=0.0, metavar="SECONDS",
                        help="minimum billed time per rental (default 0)")
    parser.add_argument("--instance-sizes", metavar="LIST", help="GPUs per instance on sale, e.g. 1,2,4,8")
    parser.add_argument("--window", type=float, metavar="HOURS", help="also bound spend over windows of this length")
    parser.add_argument("--window-spend", type=float, metavar="AMOUNT",
                        help="spend allowed per window, in budget units x hours (default: budget x window)")
    parser.add_argument("--window-prob", type=float, default=0.95,
                        help="probability with which a window must stay within its spend (default 0.95)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _cloud_config(args):
    from gpuwise.errors import InputError
    from gpuwise.sim.cloud import CloudConfig

    billing = args.billing.strip().lower()
    if billing in _BILLING:
        inc = _BILLING[billing]
    else:
        try:
            inc = float(billing)
        except ValueError:
            raise InputError("--billing", args.billing, "use exact, second, minute, hour or a number of seconds") from None
    if inc < 0 or args.boot_delay < 0 or args.min_charge < 0:
        raise InputError("--billing/--boot-delay/--min-charge", (inc, args.boot_delay, args.min_charge),
                         "must be >= 0 seconds")
    sizes = None
    if args.instance_sizes:
        try:
            sizes = tuple(sorted({int(x) for x in args.instance_sizes.split(",")}))
        except ValueError:
            raise InputError("--instance-sizes", args.instance_sizes, "give whole GPU counts, e.g. 1,2,4,8") from None
        if not sizes or sizes[0] < 1:
            raise InputError("--instance-sizes", args.instance_sizes, "sizes must be >= 1, e.g. 1,2,4,8")
    return CloudConfig(boot_delay=args.boot_delay / 3600, billing_increment=inc / 3600,
                       minimum_charge=args.min_charge / 3600, instance_sizes=sizes)


def _sol_json(sol, occ=None) -> dict:
    out = {
        "types": [{"name": a.name, "k": a.k, "widths": [{"k": k, "fraction": q} for k, q in a.widths],
                   "mean_response_time": a.mean_response_time, "speedup": a.speed, "mean_gpus": a.mean_gpus,
                   "at_cap": a.at_cap} for a in sol.types],
        "mean_response_time": sol.mean_response_time,
        "mu": sol.mu,
        "mu_range": list(sol.mu_range),
        "frontier_slope": sol.frontier_slope,
        "budget": sol.budget.amount,
        "budget_unit": sol.budget.unit,
        "budget_used": sol.budget_used,
        "mean_gpus_rented": sol.mean_gpus,
        "min_feasible_budget": sol.min_budget,
        "integer": sol.integer,
        "boot_delay_hours": sol.boot_delay,
    }
    if occ is not None:
        out["gpus_rented_distribution"] = {"mean": occ.mean, "std": occ.std, "p95": occ.p95, "p99": occ.p99,
                                           "p_zero": occ.p_zero, "p_above_mean": occ.p_over_budget}
    return out


def _sim_json(r) -> dict:
    m, lo, hi = r.mean_response_time
    g, glo, ghi = r.mean_gpus_rented
    return {"policy": r.policy, "jobs": r.jobs, "mean_response_time": m, "mean_response_time_ci": [lo, hi],
            "mean_gpus_rented": g, "mean_gpus_rented_ci": [glo, ghi], "mean_gpus_billed": r.mean_gpus_billed,
            "per_type_mean_response_time": list(r.per_type_response_time), "p95_gpus": r.p95_gpus,
            "p99_gpus": r.p99_gpus, "p_zero": r.p_zero, "wall_s": r.wall_s}


def _simulation_flags(args: argparse.Namespace) -> None:
    """Flags that only steer --simulate are refused without it (they would be silently ignored)."""
    from gpuwise.errors import InputError

    if not args.simulate:
        for flag, value in (("--jobs", args.n_jobs), ("--simulator", args.simulator),
                            ("--no-baselines", args.no_baselines or None)):
            if value is not None:
                raise InputError(flag, value, "only used when simulating; add --simulate or drop the flag")
    args.n_jobs = 100_000 if args.n_jobs is None else args.n_jobs
    args.simulator = args.simulator or "cloud"


def _inputs(args: argparse.Namespace):
    """Every flag checked before anything is solved: (spec, budget, cloud config)."""
    from gpuwise.errors import InputError
    from gpuwise.plan.rent.spec import load_spec, parse_budget

    if args.plot:
        from gpuwise.cli.output import check_output_file

        check_output_file("--plot", args.plot, (".png", ".pdf", ".svg"))
    if args.sweep:  # refuse a bad range before solving anything
        from gpuwise.plan.rent.sweep import parse_range

        parse_range(args.sweep)
    _simulation_flags(args)
    spec = load_spec(args.jobs)
    if args.budget is not None:
        budget = parse_budget(args.budget, "--budget")
    elif spec.budget is not None:
        budget = spec.budget
    else:
        raise InputError("--budget", None, "give the long-run budget, e.g. --budget 2 (GPUs) or --budget 30usd/h")
    cloud = _cloud_config(args)
    if args.seed < 0:
        raise InputError("--seed", args.seed, "must be >= 0")
    if args.simulate and args.n_jobs < 1:
        raise InputError("--jobs", args.n_jobs, "simulate at least 1 job, e.g. --jobs 100000")
    if args.simulate and args.n_jobs > MAX_JOBS:   # memory and time grow linearly: ~2 s and ~0.1 GB per 1e6
        raise InputError("--jobs", args.n_jobs, f"simulate at most {MAX_JOBS:.0e} jobs (about 20 s per policy)")
    if not 0 < args.window_prob < 1:
        raise InputError("--window-prob", args.window_prob, "must be strictly between 0 and 1, e.g. 0.95")
    return spec, budget, cloud


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.output import emit_json
    from gpuwise.plan.rent.answer import optimal_policy, policy_assumptions, rent_model
    from gpuwise.plan.rent.occupancy import occupancy

    spec, budget, cloud = _inputs(args)
    model = rent_model(list(spec.types), budget, cloud, args.integer)
    sol = optimal_policy(model)
    occ = occupancy(model.plan_types, sol)
    assumptions = policy_assumptions(model, sol, occ, spec)
    out = _sol_json(sol, occ)
    swept = _sweep(args, model, sol, spec, out, assumptions) if args.sweep or args.plot else None
    window = None
    if args.window is not None:
        from gpuwise.plan.rent.window import bound_window

        window = bound_window(model.plan_types, sol, args.window, args.window_spend, args.window_prob,
                              integer=model.plan_integer, seed=args.seed, resolve=model.resolve)
        out["window"] = window.as_dict()
        assumptions += list(window.assumptions)
    sims = _simulate(args, model, sol, spec, cloud, out, assumptions) if args.simulate else []
    out["assumptions"] = assumptions
    if args.json:
        emit_json(out)
        return 0
    _print_answer(args, spec, model.budget, sol, occ, swept, window, sims, assumptions)
    return 0


def _sweep(args, model, sol, spec, out: dict, assumptions: list):
    """--sweep/--plot: the swept policies into `out`, the plot written; returns the sweep."""
    from gpuwise.plan.rent.answer import budget_sweep
    from gpuwise.plan.rent.sweep import plot

    swept, notes = budget_sweep(model, sol, args.sweep)
    assumptions += notes
    out["sweep"] = [{"budget": b, "mean_response_time": s.mean_response_time, "mu": s.mu,
                     "k": {a.name: a.k for a in s.types},
                     "type_mean_response_time": {a.name: a.mean_response_time for a in s.types}}
                    for b, s in zip(swept.budgets, swept.solutions)]
    if args.plot:
        plot(swept, args.plot, f"{spec.source}: optimal widths and E[T] against the budget")
        out["plot"] = args.plot
    return swept


def _simulate(args, model, sol, spec, cloud, out: dict, assumptions: list) -> list:
    """--simulate: pi* and its baselines on the same jobs, into `out`; returns the simulation results."""
    from gpuwise.cli.progress import progress, wanted
    from gpuwise.plan.rent.answer import simulation_policies

    policies, notes = simulation_policies(model, sol, not args.no_baselines)
    assumptions += notes
    sims: list = []
    with progress(f"simulating {args.n_jobs:,} jobs per policy", len(policies), enabled=wanted(args)) as bar:
        _simulate_all(args, spec, model.types, policies, cloud, sims, assumptions, bar)
    out["simulated"] = {**_sim_json(sims[0]), "simulator": args.simulator}
    out["simulated"]["vs_analytic"] = {
        "mean_response_time_rel_err": sims[0].mean_response_time[0] / sol.mean_response_time - 1,
        "mean_gpus_rel_err": sims[0].mean_gpus_billed / sol.mean_gpus - 1}
    out["baselines"] = [_sim_json(r) for r in sims[1:]]
    assumptions += list(sims[0].assumptions)
    if any(t.price != 1.0 for t in model.types) and model.budget.unit == "usd_per_hour":
        assumptions.append("simulated GPUs are counted unweighted; the USD spend is the analytic budget_used")
    return sims


def _print_answer(args, spec, budget, sol, occ, swept, window, sims: list, assumptions: list) -> None:
    """The human-readable answer: pi*, occupancy, then the sweep, window and simulation asked for."""
    from gpuwise.cli.output import print_assumptions, print_table

    unit = budget.units
    print(f"{spec.source}: budget {budget.label()} (minimum feasible > {sol.min_budget:.4g} {unit})")
    print_table("Optimal fixed-width rental policy pi*", ["type", "width k", "E[T_i] (h)", "speedup", "GPUs (avg)"],
                [[a.name, " + ".join(f"{k:g} ({q:.0%})" if len(a.widths) > 1 else f"{k:.4g}" for k, q in a.widths),
                  f"{a.mean_response_time:.4g}", f"{a.speed:.4g}", f"{a.mean_gpus:.4g}"] for a in sol.types])
    print(f"E[T] = {sol.mean_response_time:.6g} h   mu = {sol.mu:.6g}   dE[T]/db = {sol.frontier_slope:.6g} h per "
          f"{unit[:-1] if unit == 'GPUs' else 'USD/h'}   budget used = {sol.budget_used:.6g} {unit}")
    print(f"GPUs rented at a random moment: mean {occ.mean:.4g}, sd {occ.std:.4g}, p95 {occ.p95:.4g}, "
          f"p99 {occ.p99:.4g}, P(none) {occ.p_zero:.3f}, P(above mean) {occ.p_over_budget:.3f}")
    if swept is not None and args.sweep:
        names = [a.name for a in sol.types]
        print_table("E[T] and widths against the budget", ["budget"] + [f"k {n}" for n in names]
                    + [f"E[T] {n}" for n in names] + ["E[T]", "mu"],
                    [[f"{b:.4g}"] + [f"{a.k:.4g}" for a in s.types] + [f"{a.mean_response_time:.4g}" for a in s.types]
                     + [f"{s.mean_response_time:.4g}", f"{s.mu:.4g}"] for b, s in zip(swept.budgets, swept.solutions)])
    if args.plot:
        print(f"plot written to {args.plot}")
    if window is not None:
        window.print()
    if sims:
        _print_simulation(args, sol, sims)
    print_assumptions(assumptions)


def _print_simulation(args, sol, sims: list) -> None:
    from gpuwise.cli.output import print_table

    where = "Cloud simulation" if args.simulator == "cloud" else "Unbounded-cluster simulation"
    print_table(f"{where} ({sims[0].jobs} jobs, seed {args.seed}; 95% CI)",
                ["policy", "E[T] (h)", "CI", "GPUs rented", "CI", "GPUs billed", "p99 GPUs", "wall (s)"],
                [[r.policy, f"{r.mean_response_time[0]:.4g}",
                  f"[{r.mean_response_time[1]:.4g}, {r.mean_response_time[2]:.4g}]",
                  f"{r.mean_gpus_rented[0]:.4g}", f"[{r.mean_gpus_rented[1]:.4g}, {r.mean_gpus_rented[2]:.4g}]",
                  f"{r.mean_gpus_billed:.4g}", f"{r.p99_gpus:.4g}", f"{r.wall_s:.2f}"] for r in sims])
    r = sims[0]
    print(f"pi* simulated vs analytic: E[T] {r.mean_response_time[0]:.5g} vs {sol.mean_response_time:.5g} "
          f"({100 * (r.mean_response_time[0] / sol.mean_response_time - 1):+.2f}%), GPUs billed "
          f"{r.mean_gpus_billed:.5g} vs {sol.mean_gpus:.5g} ({100 * (r.mean_gpus_billed / sol.mean_gpus - 1):+.2f}%)")


def _simulate_all(args, spec, types, policies, cloud, sims: list, assumptions: list, bar) -> None:
    """Simulate every policy on the same jobs (common random numbers), appending to `sims`."""
    import numpy as np

    from gpuwise.sim.cloud import poisson_workload, simulate, trace_workload

    for p in policies:
        bar.advance(0, f"simulating {p.name}")
        rng = np.random.default_rng(args.seed)  # common random numbers: same jobs for every policy
        if spec.trace is not None:
            wl = trace_workload(spec.trace, types, rng, args.n_jobs)
        else:
            wl = poisson_workload(types, args.n_jobs, rng)
        if args.simulator == "cloud":
            sims.append(simulate(types, p, wl, cloud, rng))
            bar.advance()
            continue
        from gpuwise.errors import InputError
        from gpuwise.sim.cloud_cluster import simulate_on_cluster

        try:
            sims.append(simulate_on_cluster(types, p, wl, cloud, rng))
        except InputError:
            if not sims:
                raise  # pi* itself: the user must ask for whole GPUs (--integer)
            assumptions.append(f"baseline {p.name} not simulated: fractional widths do not run on a cluster")
        finally:
            bar.advance()
