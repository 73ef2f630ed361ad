"""`gpuwise plan JOB.yaml`: what to rent for one training job."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB.yaml", help="job spec (see examples/)")
    parser.add_argument("--objective", choices=("cost", "time", "knee", "deadline"), default="cost",
                        help="cheapest (default), fastest, knee of the time/cost front, or cheapest "
                             "meeting the job's deadline")
    parser.add_argument("--cloud", action="extend", nargs="+", metavar="NAME", default=None,
                        help="allowed clouds (one or more, repeatable; overrides constraints.clouds)")
    parser.add_argument("--gpu", action="extend", nargs="+", metavar="NAME", default=None,
                        help="allowed GPU types (one or more, repeatable; overrides constraints.gpus)")
    spot = parser.add_mutually_exclusive_group()
    spot.add_argument("--spot", dest="spot", action="store_true", default=None,
                      help="also consider spot instances (overrides constraints.spot)")
    spot.add_argument("--no-spot", dest="spot", action="store_false", help="on-demand only")
    parser.add_argument("--max-gpus", type=int, default=None, help="most GPUs in total")
    parser.add_argument("--stack", default=None, metavar="S",
                        help="training stack whose defaults apply (overrides the spec's training.stack; "
                             "see gpuwise/data/stacks/stacks.csv)")
    parser.add_argument("--top", type=int, default=10, help="how many candidates to list (default 10)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--plot", metavar="FILE", default=None,
                        help="write the time/cost plane (.png or .svg)")
    parser.add_argument("--export-skypilot", metavar="FILE", default=None,
                        help="write a SkyPilot task YAML for the chosen configuration")
    parser.add_argument("--price", action="append", metavar="GPU=USD", default=None,
                        help="your on-demand price for a GPU type in USD per GPU-hour, on every catalog offering "
                             "of it (repeatable), e.g. --price H100=2.10")
    parser.add_argument("--offerings", metavar="FILE", default=None,
                        help="your own offerings (.yaml list or .csv): gpu, gpus_per_node, price (USD per GPU-hour), "
                             "optional spot_price, name, cloud (default 'user'), region; added to the catalog")
    parser.add_argument("--include-outlier-prices", action="store_true",
                        help="also plan on spot prices far below their GPU type's (left out by default; "
                             "the rule is in the assumptions)")
    parser.add_argument("--catalog-dir", action="append", metavar="DIR", default=None,
                        help="SkyPilot v8 catalog folder (<dir>/<cloud>/vms.csv), repeatable: each cloud it holds REPLACES that cloud's bundled rows (clouds it does not hold keep theirs)")


def _export(res, path: str) -> str:
    from gpuwise.plan.planner import candidate_dict
    from gpuwise.plan.skypilot_export import ExportChoice, accelerator_name, write_task

    cs = res.candidates
    c = candidate_dict(cs, res.chosen)
    off = cs.offerings[cs.off_idx[res.chosen]]
    opt = cs.options[cs.opt_idx[res.chosen]]
    envs = {"GPUWISE_DP": opt.plan.dp, "GPUWISE_TP": opt.plan.tp, "GPUWISE_PP": opt.plan.pp,
            "GPUWISE_CP": opt.plan.cp, "GPUWISE_ZERO": opt.plan.zero, "GPUWISE_ZERO_SHARD": opt.plan.zero_shard,
            "GPUWISE_GLOBAL_BATCH": opt.global_batch,
            "GPUWISE_MICRO_BATCH": opt.micro_batch, "GPUWISE_GRAD_ACCUM": opt.grad_accum}
    if opt.config is not None:
        envs["GPUWISE_RECOMPUTE"] = opt.config.recompute
    if c["checkpoint_interval_hours"]:
        envs["GPUWISE_CHECKPOINT_MINUTES"] = round(c["checkpoint_interval_hours"] * 60, 1)
    summary = (f"{c['nodes']} x {c['instance_type']} ({c['gpus']} x {c['gpu']}, "
               f"{'spot' if c['spot'] else 'on-demand'}) in {c['cloud']} {c['region']}: "
               f"expected {c['time_hours']:.1f} h, ${c['cost_usd']:,.0f} at ${c['hourly_usd']:.2f}/h "
               f"(catalog {c['catalog_date']})")
    choice = ExportChoice(res.job.name, off.cloud, off.region, off.instance_type, accelerator_name(off),
                          off.gpus_per_node, int(c["nodes"]), bool(c["spot"]), envs, summary, c["zone"])
    _, how = write_task(choice, path)
    return how


def _table(data: dict, res) -> None:
    from gpuwise.cli.output import print_table
    from gpuwise.plan.skypilot_export import accelerator_name

    cs = res.candidates
    rows = []
    for i, (c, r) in enumerate(zip(data["candidates"], res.ranked)):
        mark = "*" if i == data["chosen_index"] else ""
        h = lambda x: f"{x:.0f}" if x >= 10 else f"{x:.1f}"  # noqa: E731
        hours = h(c["time_hours"])
        if c["spot"]:
            hours += f" ({h(c['time_hours_p10'])}-{h(c['time_hours_p90'])})"
        gpu = accelerator_name(cs.offerings[cs.off_idx[r]])   # short catalog name, e.g. H100
        rows.append([f"{mark}{i + 1}", f"{c['cloud']}:{c['region']}", f"{c['nodes']}x {c['instance_type']}",
                     f"{c['gpus']}x {gpu}", ("spot!" if c["spot_price_outlier"] else "spot") if c["spot"] else "od", hours, f"{c['cost_usd']:,.0f}",
                     f"{c['usd_per_gpu_hour']:.2f}",
                     f"{c['global_batch_size']}~" if c["global_batch_rounded"] else c["global_batch_size"], c["plan"]])
    print_table(f"gpuwise plan {data['job']} -- objective {data['objective']}: "
                f"{data['candidates_feasible']:,} feasible candidates from {data['candidates_evaluated']:,} "
                "configurations (* = chosen; od = on-demand; spot! = outlier spot price; hours: expected (p10-p90) "
                "on spot; batch~ = the fixed global batch rounded: no layout of that shape holds it exactly)",
                ["#", "cloud:region", "instances", "GPUs", "price", "hours", "USD", "$/GPU-h", "batch", "plan"],
                rows)


def _nearest_text(value) -> str:
    """A nearest-feasible value: a number (budget, deadline) or GPU counts [{gpu, gpus, ...}]."""
    if isinstance(value, (int, float)):
        return f"{value:,.2f}"
    if isinstance(value, list) and all(isinstance(d, dict) and {"gpu", "gpus"} <= set(d) for d in value):
        return ", ".join(f"{d['gpus']} x {d['gpu']}" for d in value)
    return str(value)


def run(args: argparse.Namespace) -> int:
    from gpuwise.errors import InputError
    from gpuwise.hardware.catalog import load_catalog
    from gpuwise.plan.job import from_jobspec
    from gpuwise.plan.planner import plan, to_json
    from gpuwise.workload.jobspec import load_job

    if args.top < 1:
        raise InputError("--top", args.top, "give at least 1")
    if args.max_gpus is not None and args.max_gpus < 1:
        raise InputError("--max-gpus", args.max_gpus, "give at least 1")
    from gpuwise.cli.output import check_output_file

    if args.plot:
        check_output_file("--plot", args.plot, (".png", ".svg"))
    if args.export_skypilot:
        check_output_file("--export-skypilot", args.export_skypilot, (".yaml", ".yml"))
    spec = load_job(args.job)
    if args.stack:
        from gpuwise.workload.stacks import stack_row

        stack_row(args.stack)           # InputError naming the stacks
        spec = spec.model_copy(update={"training": spec.training.model_copy(update={"stack": args.stack})})
    job = from_jobspec(spec, clouds=args.cloud, gpus=args.gpu, spot=args.spot, max_gpus=args.max_gpus)
    from gpuwise.plan.user_prices import with_user_prices

    catalog = load_catalog(args.catalog_dir) if args.catalog_dir else load_catalog()
    catalog = with_user_prices(catalog, args.price, args.offerings)
    res = plan(job, catalog, args.objective, args.top, include_outliers=args.include_outlier_prices)
    data = to_json(res)
    notes = []
    if args.plot:
        from gpuwise.plan.plot import plot_plan

        notes.append(f"plot written to {plot_plan(res, args.plot)}")
    if args.export_skypilot:
        from gpuwise.plan.offerings import is_user_priced

        if res.chosen is None:
            notes.append("no SkyPilot task written: nothing meets the constraints")
        elif is_user_priced(res.candidates.offerings[res.candidates.off_idx[res.chosen]]):
            notes.append("no SkyPilot task written: the chosen offering is one of yours (--offerings)")
        else:
            how = _export(res, args.export_skypilot)
            data["skypilot_export"] = {"path": args.export_skypilot, "validation": how}
            notes.append(f"SkyPilot task written to {args.export_skypilot} ({how})")
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json(data)
        return _infeasible_exit(res)
    from gpuwise.cli.output import print_assumptions

    if res.chosen is None:
        binding = res.infeasible.get("binding") or []
        print(f"No configuration meets the constraints ({binding if isinstance(binding, str) else ', '.join(binding)}).")
        print(res.infeasible["message"])
        for k, v in (res.infeasible.get("nearest") or {}).items():
            print(f"  nearest feasible: {k} = {_nearest_text(v)}")
    else:
        _table(data, res)
        print("Chosen (*): " + res.explanation[0])
        for line in res.explanation[1:]:
            print("  " + line)
    for n in notes:
        print(n)
    print_assumptions(res.assumptions)
    return _infeasible_exit(res)


def _infeasible_exit(res) -> int:
    """Exit code 1 when nothing meets the constraints (valid input, no feasible answer); stderr names the
    binding constraint and the nearest feasible option so scripts see it next to the code."""
    import sys

    if res.chosen is not None:
        return 0
    binding = res.infeasible.get("binding") or []
    nearest = "; ".join(f"nearest feasible: {k} = {_nearest_text(v)}"
                        for k, v in (res.infeasible.get("nearest") or {}).items())
    sys.stderr.write(f"gpuwise plan: no feasible answer: {binding if isinstance(binding, str) else ', '.join(binding)}"
                     f" binds" + (f"; {nearest}" if nearest else "") + "\n")
    return 1
