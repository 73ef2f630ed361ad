"""`gpuwise cancel ID`: cancel one of your jobs on a gpuwise server."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="job id (from gpuwise submit or gpuwise jobs)")
    parser.add_argument("--server", metavar="URL", default=None, help="server (as gpuwise submit)")


def run(args: argparse.Namespace) -> int:
    import sys

    from gpuwise.service.client import ServiceError, call

    try:
        res = call("DELETE", args.server, f"/v1/jobs/{args.id}")
    except ServiceError as exc:
        sys.stderr.write(f"gpuwise cancel: {exc}\n")
        return 1
    print(f"job {res['id']} cancelled (was {res['was']})")
    return 0
