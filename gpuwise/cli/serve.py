"""`gpuwise serve`: the job service (HTTP API v1, OpenAPI schema at /openapi.json, dashboard at /).

One server per store: a second on the same SQLite file refuses (exit 2). Files it creates (the
store, its WAL, job specs, checkpoints) are readable by the server's user only.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="URL", default=None,
                        help="SQLAlchemy URL of the store (default: sqlite:///$GPUWISE_HOME/service.db, "
                             "GPUWISE_HOME defaulting to ~/.gpuwise)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 = any free port)")
    parser.add_argument("--backend", choices=("sim", "ray"), default="sim",
                        help="sim: jobs run in simulated time; ray: jobs train for real on Ray slot workers "
                             "(the runtime's small models, tiny-llama and tiny-resnet; others are refused)")
    parser.add_argument("--cluster", metavar="CLUSTER.yaml", default=None,
                        help="cluster the jobs share (default: bundled 96-GPU T4/V100/A100 cluster; with "
                             "--backend ray: 2 CPU slots, data/clusters/ray-local.yaml)")
    parser.add_argument("--ray-address", metavar="ADDR", default=None,
                        help="ray backend: an existing Ray cluster advertising the cluster's GPU types as "
                             "resources (default: start a private local head, ended with the server)")
    parser.add_argument("--policy", default=None,
                        help="scheduling policy (default: the one recorded in the store, else frenzy)")
    parser.add_argument("--time-scale", type=float, default=60.0,
                        help="sim backend: simulated seconds per wall second (default 60)")
    parser.add_argument("--round-s", type=float, default=0.2, help="seconds between scheduling rounds")
    parser.add_argument("--read-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="a client's request headers, and then its body, must arrive within this (default 10)")
    parser.add_argument("--inputs-dir", metavar="DIR", default=None,
                        help="the only folder whose files a submitted job spec may name (entrypoint, data, weights, "
                             "tokenizer), relative to it; default: none (no client-named file is ever run or read)")


def run(args: argparse.Namespace) -> int:
    import os

    from gpuwise.data import data_path
    from gpuwise.errors import InputError
    from gpuwise.hardware.cluster import load_cluster
    from gpuwise.jobqueue.scheduler import open_queue
    from gpuwise.runtime.pool import WorkersNotReady

    if not 0 <= args.port <= 65535:
        raise InputError("--port", args.port, "give 0-65535")
    if not args.round_s > 0:
        raise InputError("--round-s", args.round_s, "give a positive number of seconds")
    if not 0 < args.read_timeout < 3600:
        raise InputError("--read-timeout", args.read_timeout, "give seconds, more than 0 and under 3600")
    if args.inputs_dir is not None and not os.path.isdir(args.inputs_dir):
        raise InputError("--inputs-dir", args.inputs_dir, "give an existing folder")
    if args.ray_address and args.backend != "ray":
        raise InputError("--ray-address", args.ray_address, "only the ray backend uses it; add --backend ray")
    default = "ray-local.yaml" if args.backend == "ray" else "service-default.yaml"
    cluster = load_cluster(args.cluster or data_path("clusters", default))
    lock = _lock_store(args.db)
    os.umask(0o077)             # the store, its WAL, job specs and checkpoints: this user's only
    if args.backend == "ray":
        print(f"gpuwise serve: starting Ray workers for {cluster.total_gpus} slots "
              f"({args.ray_address or 'private local head'})...", flush=True)
    try:
        sch = open_queue(args.db, cluster, args.backend, args.policy, args.time_scale, args.round_s,
                         ray_address=args.ray_address)
    except WorkersNotReady as exc:
        print(f"gpuwise serve: {exc}", flush=True)
        return 1
    device = getattr(getattr(sch.backend, "pool", None), "device", None)
    if device is not None:     # the ray backend: real CUDA GPUs or fake CPU slots (auto), stated
        from gpuwise.runtime.devices import describe

        print(f"gpuwise serve: {describe(device.as_dict())}", flush=True)
    try:
        return _serve(args, cluster, sch)
    finally:
        sch.backend.close()     # the Ray backend's workers and private head
        if lock is not None:
            lock.release()


def _lock_store(db: str | None):
    """One server per SQLite store (another database: the operator's to ensure)."""
    from gpuwise.jobqueue.store import default_url, sqlite_path
    from gpuwise.runtime.lock import WriterLock

    path = sqlite_path(db or default_url())
    if path is None:
        return None
    return WriterLock(path.with_name(path.name + ".lock"), "--db", db or str(path), "gpuwise serve")


def _serve(args: argparse.Namespace, cluster, sch) -> int:
    import signal
    import socket

    import uvicorn

    from gpuwise.errors import InputError
    from gpuwise.service.app import create_app
    from gpuwise.service.limits import timed_protocol

    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        raise InputError("--port", args.port, f"cannot listen on {args.host}:{args.port} ({exc.strerror}); "
                         "pick another port or 0") from None
    port = sock.getsockname()[1]
    print(f"gpuwise serve: {cluster.name} ({cluster.describe()}), backend {args.backend}, policy "
          f"{sch.policy.name}, store {sch.store.url}", flush=True)
    print(f"gpuwise serve: listening on http://{args.host}:{port} (API /v1, schema /openapi.json, "
          "dashboard / : sign in with a token)", flush=True)
    app = create_app(sch.store, sch, read_timeout_s=args.read_timeout, inputs_dir=args.inputs_dir)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http=timed_protocol(args.read_timeout),
                                           timeout_keep_alive=5, h11_max_incomplete_event_size=64 * 1024))
    try:
        server.run(sockets=[sock])
    except SystemExit as exc:   # uvicorn re-raises the SIGTERM it shut down on; Ray's driver handler
        if exc.code != signal.SIGTERM:  # turns that into SystemExit(15): a clean, requested exit
            raise
    return 0
