"""Benchmark: the job service (`gpuwise serve`, sim backend) on loopback.

Prints, against baselines measured in the same run:
- submission latency p50/p99 of POST /v1/jobs (N concurrent clients) vs GET /v1/health (the bare HTTP
  round trip through the same server);
- the scheduling round time with 1,000 queued jobs (the cluster full of long jobs, so they stay
  queued; a round = pick up + progress + policy + one transaction) vs one SELECT of the active jobs.
Run: python benchmarks/service_api.py [--submissions 400] [--concurrency 32] [--queued 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"preset": "resnet18-cifar10", "amount": {"samples": 20000}, "global_batch": 128}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _cpu_s(pid: int) -> float:
    """utime + stime of a process (Linux /proc), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submission_latency(n: int, conc: int) -> None:
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUWISE_HOME": str(tmp)}
    db = f"sqlite:///{tmp / 'service.db'}"
    tok = subprocess.run([sys.executable, "-m", "gpuwise", "token", "create", "bench", "--db", db], env=env,
                         capture_output=True, text=True, check=True).stdout.split("GPUWISE_TOKEN=")[-1].strip()
    proc = subprocess.Popen([sys.executable, "-m", "gpuwise", "serve", "--db", db, "--port", "0"], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        url = next(line for line in proc.stdout if "listening on" in line).split("listening on ")[1].split()[0]
        hdr = {"Authorization": f"Bearer {tok}"}
        limits = httpx.Limits(max_connections=conc)
        with httpx.Client(timeout=120, limits=limits) as c:
            for _ in range(100):
                try:
                    c.get(url + "/v1/health")
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            c.post(url + "/v1/jobs", json=SPEC, headers=hdr).raise_for_status()   # warm the prediction cache

            def timed(fn):
                t = time.perf_counter()
                fn()
                return time.perf_counter() - t

            def post(i):
                return timed(lambda: c.post(url + "/v1/jobs", json={**SPEC, "name": f"b{i}"}, headers=hdr)
                             .raise_for_status())

            def health(_):
                return timed(lambda: c.get(url + "/v1/health").raise_for_status())

            cpu0 = time.process_time()
            with ThreadPoolExecutor(conc) as pool:
                base = list(pool.map(health, range(n)))
                t0, s0 = time.perf_counter(), _cpu_s(proc.pid)
                lat = list(pool.map(post, range(n)))
                wall, server_cpu = time.perf_counter() - t0, _cpu_s(proc.pid) - s0
            cpu = time.process_time() - cpu0
        print(f"submissions: {n} POST /v1/jobs from {conc} concurrent clients in {wall:.2f} s wall "
              f"({n / wall:.0f}/s; server CPU {server_cpu:.2f} s = {1e3 * server_cpu / n:.1f} ms per submission "
              f"incl. its scheduler rounds; client CPU {cpu:.2f} s)")
        print(f"  latency p50 {1e3 * _pct(lat, .5):.1f} ms, p99 {1e3 * _pct(lat, .99):.1f} ms; baseline "
              f"GET /v1/health p50 {1e3 * _pct(base, .5):.1f} ms, p99 {1e3 * _pct(base, .99):.1f} ms; ratio p50 "
              f"{_pct(lat, .5) / _pct(base, .5):.1f}x")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def round_time(queued: int, rounds: int) -> None:
    from gpuwise.hardware.cluster import make_cluster
    from gpuwise.jobqueue.admission import admit
    from gpuwise.jobqueue.scheduler import open_queue
    from gpuwise.plan.submit import spec_from_preset
    from gpuwise.jobqueue.store import ACTIVE

    tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
    cluster = make_cluster([("T4", 2, 4)], name="bench-8xT4", inter_node_gbps=50.0)
    sch = open_queue(f"sqlite:///{tmp / 'service.db'}", cluster, "sim", "frenzy", time_scale=1.0)
    user, _ = sch.store.create_token("bench")
    long = spec_from_preset("resnet18-cifar10", {"epochs": 10000, "dataset_samples": 50000}, 128, name="long")
    short = spec_from_preset("resnet18-cifar10", {"samples": 20000}, 128, name="queued")
    for _ in range(8):
        admit(sch.store, cluster, user, long, clock=sch.backend.now)
    sch.round()                                    # the long jobs take every GPU
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(queued):
        admit(sch.store, cluster, user, short, clock=sch.backend.now)
    fill = time.perf_counter() - t0, time.process_time() - c0
    times, pol = [], []
    for _ in range(rounds):
        sch.loop.request_round(sch.backend.now())  # worst case: a round right after an arrival
        t = time.perf_counter()
        sch.round()
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        sch.store.jobs(states=ACTIVE)
        pol.append(time.perf_counter() - t)
    waiting = sum(1 for js in sch.jobs.values() if js.allocation is None)
    print(f"scheduling round with {waiting} queued jobs ({len(sch.jobs)} active) on {cluster.describe()}: "
          f"median {1e3 * statistics.median(times):.1f} ms, max {1e3 * max(times):.1f} ms over {rounds} rounds; "
          f"baseline reading the active jobs once (SELECT) median {1e3 * statistics.median(pol):.1f} ms; ratio "
          f"{statistics.median(times) / statistics.median(pol):.1f}x")
    print(f"  (recording {queued} submissions in-process: {fill[0]:.2f} s wall, {fill[1]:.2f} s CPU)")
    sch.store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    round_time(args.queued, args.rounds)
    submission_latency(args.submissions, args.concurrency)


if __name__ == "__main__":
    main()
