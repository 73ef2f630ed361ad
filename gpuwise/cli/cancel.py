"""`gpuwise cancel ID`: cancel one of your jobs on a gpuwise server."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="job id, or a unique start of it (the dashboard's short id)")
    parser.add_argument("--server", metavar="URL", default=None, help="server (as gpuwise submit)")
    parser.add_argument("--json", action="store_true", help="print the server's JSON answer")


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.service_call import answer
    from gpuwise.service.client import job_id

    return answer("cancel", args, "DELETE", lambda: f"/v1/jobs/{job_id(args.server, args.id)}",
                  lambda res: print(f"job {res['id']} cancelled (was {res['was']})"))
