"""`gpuwise jobs [ID]`: your jobs on a gpuwise server (an admin sees everyone's), or one of them by
its id or a unique start of it (the dashboard's short id)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", nargs="?", default=None,
                        help="only this job: its id or a unique start of it (the dashboard's short id)")
    parser.add_argument("--server", metavar="URL", default=None, help="server (as gpuwise submit)")
    parser.add_argument("--state", default=None, help="only jobs in this state (queued, running, done...)")
    parser.add_argument("--json", action="store_true", help="print the server's JSON answer")


def _render(res: dict) -> None:
    from gpuwise.cli.output import print_table

    rows = [[j["id"], j["name"], j["user"], j["state"],
             f"{j['gpus']} x {j['allocation']['gpu_type']}" if j["allocation"] else "-",
             f"{100 * j['progress']:.0f}%", "" if j["jct_s"] is None else f"{j['jct_s']:.0f}"]
            for j in res["jobs"]]
    print_table(f"{len(rows)} jobs", ["id", "name", "user", "state", "GPUs", "progress", "JCT s"], rows)


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.service_call import answer
    from gpuwise.service.client import job_id

    if args.id is not None:
        return answer("jobs", args, "GET", lambda: f"/v1/jobs/{job_id(args.server, args.id)}",
                      lambda job: _render({"jobs": [job]}))
    path = "/v1/jobs" + (f"?state={args.state}" if args.state else "")
    return answer("jobs", args, "GET", path, _render)
