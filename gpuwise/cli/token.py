"""`gpuwise token create USER`: a new API token for the job service (stored hashed)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("create",), help="create: a new token for USER")
    parser.add_argument("user", metavar="USER", help="user name (created if new)")
    parser.add_argument("--admin", action="store_true", help="the user sees and cancels every job")
    parser.add_argument("--quota-gpus", type=int, default=None, metavar="N",
                        help="most GPUs the user's jobs hold at once (default: no limit)")
    parser.add_argument("--db", metavar="URL", default=None, help="store URL (as gpuwise serve --db)")


def run(args: argparse.Namespace) -> int:
    from gpuwise.jobqueue.store import Store

    store = Store(args.db)
    user, token = store.create_token(args.user, args.admin, args.quota_gpus)
    role = "admin" if user.admin else f"quota {user.quota_gpus} GPUs" if user.quota_gpus else "no quota"
    print(f"store {store.url}; user {user.name} ({role})")
    print(f"token for {user.name}, shown once (HTTP: Authorization: Bearer TOKEN); for gpuwise submit/jobs/cancel run:")
    print(f"export GPUWISE_TOKEN={token}")
    store.close()
    return 0
