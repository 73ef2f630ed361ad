"""`gpuwise run`: a scheduling policy driving real PyTorch training on a Ray cluster."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from typing import Iterator


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuwise.policies.registry import POLICIES

    parser.add_argument("--cluster", required=True, metavar="CLUSTER.yaml",
                        help="cluster spec (as for simulate); locally each GPU is a fake slot of that type")
    parser.add_argument("--workload", required=True, metavar="FILE",
                        help="job stream CSV/YAML: name,time,num_gpus,application (tiny-llama|tiny-resnet),"
                             "steps,batch_size[,min_batch,max_batch,gpu_type,lr]")
    parser.add_argument("--policy", required=True, help="one of: " + ", ".join(POLICIES))
    parser.add_argument("--address", metavar="ADDR", help="an existing Ray cluster (default: start a local one)")
    parser.add_argument("--preempt-every", type=float, metavar="SECONDS",
                        help="inject a preemption (kill a worker of a training job) this often")
    parser.add_argument("--preempt-max", type=int, metavar="N",
                        help="inject at most N preemptions (default: no limit)")
    parser.add_argument("--chunk-steps", type=int, default=10,
                        help="steps per chunk = checkpoint interval (default 10)")
    parser.add_argument("--round-s", type=float, default=5.0, metavar="SECONDS",
                        help="scheduling round cadence: the policy's minimum interval and period between "
                             "rounds (default 5; simulate's defaults of minutes suit jobs of hours)")
    parser.add_argument("--state", default=".gpuwise-run", metavar="DIR",
                        help="state folder: SQLite state, checkpoints, Ray temp (default .gpuwise-run); "
                             "a run interrupted with this folder resumes")
    parser.add_argument("--max-wall", type=float, default=900.0, metavar="SECONDS",
                        help="stop after this long, leaving unfinished jobs (default 900)")
    parser.add_argument("--devices", default="auto", metavar="auto|cuda|cpu",
                        help="slots on real CUDA GPUs (cuda: one per slot, Ray's num_gpus) or fake slots on the CPU; "
                             "auto (default): cuda when this machine (or the --address cluster's GPU resources) has "
                             "at least as many CUDA devices as the cluster spec has slots")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--plot", metavar="DIR", help="write JCT CDF, GPUs-in-use and queue plots here")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gpuwise.cli.simulate import check_plot_dir
    from gpuwise.errors import InputError
    from gpuwise.hardware.cluster import load_cluster
    from gpuwise.policies.registry import make_policy
    from gpuwise.runtime.devices import MODES
    from gpuwise.runtime.driver import RunOptions, check_options
    from gpuwise.runtime.report import execute
    from gpuwise.runtime.workload import load_run_workload

    make_policy(args.policy)
    if args.devices not in MODES:
        raise InputError("--devices", args.devices, "give one of " + ", ".join(MODES))
    check_plot_dir("--plot", args.plot)
    if not args.max_wall > 0:
        raise InputError("--max-wall", args.max_wall, "give seconds > 0")
    cluster = load_cluster(args.cluster)
    if cluster.unbounded:
        raise InputError("--cluster", args.cluster, "gpuwise run needs a fixed cluster (nodes with counts)")
    workload = load_run_workload(args.workload)
    from gpuwise.workload.traces import check_fits

    check_fits(workload, {t: cluster.gpus_of_type(t) for t in cluster.gpu_types})
    opts = RunOptions(Path(args.state), args.address, args.chunk_steps, args.preempt_every, args.preempt_max,
                      args.max_wall, round_s=args.round_s, devices=args.devices)
    check_options(opts)
    live = sys.stdout.isatty() and not args.json
    from gpuwise.runtime.pool import WorkersNotReady

    try:
        with stdout_to_stderr(args.json):
            out = execute(cluster, workload, args.policy, opts, live)
    except WorkersNotReady as e:
        print(f"gpuwise run: {e}", file=sys.stderr)
        return 1
    if args.plot:
        from gpuwise.sim.plots import write_plots

        out["plots"] = write_plots({args.policy: out.pop("_series")}, args.plot, cluster.total_gpus)
    out.pop("_series", None)
    if args.json:
        from gpuwise.cli.output import emit_json

        emit_json(out)
    else:
        _print(out)
    if out["jobs_unfinished"]:
        print(f"gpuwise run: {out['jobs_unfinished']} jobs unfinished after --max-wall {args.max_wall:g} s; "
              "rerun with the same --state to resume them", file=sys.stderr)
        return 1
    return 0


@contextmanager
def stdout_to_stderr(on: bool) -> Iterator[None]:
    """With --json, stdout carries the JSON alone: whatever Ray prints meanwhile from this process or
    a child it starts (its "worker died" line after a preemption) goes to stderr, at the descriptor."""
    if not on:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _print(out: dict) -> None:
    from gpuwise.cli.output import print_assumptions, print_table

    print(f"{out['policy']} on {out['cluster']}: {out['jobs_completed']} jobs done in {out['makespan_s']:.0f} s, "
          f"{out['rescales']} rescales, {out['restarts']} fault restarts, {out['lost_steps']} steps lost, "
          f"Ray start {out['ray_start_s']:.1f} s")
    if out.get("devices"):
        from gpuwise.runtime.devices import describe

        print(describe(out["devices"]))
    for n in out.get("lost_nodes", []):
        print(f"node {n['name']} lost at {n['t']:.0f} s: {n['gpus']} {n['gpu_type']} GPUs gone for the rest of the run")

    def f(x, fmt="{:.1f}"):
        return "-" if x is None else fmt.format(x)

    print_table("measured vs simulated JCT", ["job", "trains", "measured (s)", "simulated (s)", "error", "events"],
                [(j["name"], j["trains"], f(j["measured_jct_s"]), f(j["simulated_jct_s"]), f(j["jct_error"], "{:.0%}"),
                  " ".join(e["kind"] + (f"({e['gpus']}x{e['batch']})" if "gpus" in e else "") for e in j["events"]))
                 for j in out["jobs"]])
    print(f"median JCT error of the simulator on the measured models: {f(out['jct_median_error'], '{:.0%}')} "
          f"(policy replay); {f(out['jct_median_error_oracle_view'], '{:.0%}')} with the final models seen from t=0; "
          f"{f(out['jct_median_error_same_decisions'], '{:.0%}')} on the run's own decisions "
          "(speed model only, in-sample)")
    print(f"measured step times per chunk, next to the predicted ones: {out['measurements']} "
          "(gpuwise validate runs)")
    print_assumptions(out["assumptions"])
