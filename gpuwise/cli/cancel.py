"""`gpuwise cancel ID`: cancel one of your jobs on a gpuwise server."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="job id (from gpuwise submit or gpuwise jobs)")
    parser.add_argument("--server", metavar="URL", default=None, help="server (as gpuwise submit)")
    parser.add_argument("--json", action="store_true", help="print the server's JSON answer")


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.service_call import answer

    return answer("cancel", args, "DELETE", f"/v1/jobs/{args.id}",
                  lambda res: print(f"job {res['id']} cancelled (was {res['was']})"))
