"""`gpuwise token create USER` / `gpuwise token revoke USER`: API tokens of the job service (stored hashed).

A revoked token is refused by a running server at its next request (the server keeps no copy)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("create", "revoke"),
                        help="create: a new token for USER; revoke: delete every token of USER")
    parser.add_argument("user", metavar="USER", help="user name (created if new)")
    parser.add_argument("--admin", action="store_true", help="the user sees and cancels every job")
    parser.add_argument("--quota-gpus", type=int, default=None, metavar="N",
                        help="most GPUs the user's jobs hold at once (default: no limit)")
    parser.add_argument("--db", metavar="URL", default=None, help="store URL (as gpuwise serve --db)")


def run(args: argparse.Namespace) -> int:
    from gpuwise.errors import InputError
    from gpuwise.jobqueue.store import Store

    if args.action == "revoke" and (args.admin or args.quota_gpus is not None):
        raise InputError("--admin/--quota-gpus", "revoke", "only token create takes them")
    store = Store(args.db)
    try:
        if args.action == "revoke":
            n = store.revoke_tokens(args.user)
            print(f"store {store.url}; revoked {n} token{'s' * (n != 1)} of user {args.user}")
            return 0
        user, token = store.create_token(args.user, args.admin, args.quota_gpus)
    finally:
        store.close()
    role = "admin" if user.admin else f"quota {user.quota_gpus} GPUs" if user.quota_gpus else "no quota"
    print(f"store {store.url}; user {user.name} ({role})")
    print(f"token for {user.name}, shown once (HTTP: Authorization: Bearer TOKEN); for gpuwise submit/jobs/cancel run:")
    print(f"export GPUWISE_TOKEN={token}")
    return 0
