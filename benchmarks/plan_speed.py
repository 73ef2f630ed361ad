"""Planner speed: the pruned search against the exhaustive one, candidates evaluated per second, and
how time scales with catalog size.

First the candidate generation of the job is timed cold (fresh process caches: memory and step-time
estimates included) with the exact prunings (the default) and with `exhaustive=True` (every plan
variant estimated, every fitting configuration timed), alternating, and printed as a ratio measured
in the same run; both must give the same candidates.

The bundled catalog is subsampled (1/4, 1/2) or replicated into synthetic extra regions (2x, 4x);
each size is planned cold (fresh shape cache, i.e. memory + step-time evaluation included) and the
times are printed as ratios against the 1x run measured in the same process. Also times the whole
`gpuwise plan examples/llama-3.1-8b-pretrain.yaml --json` command in a subprocess (start-up included;
the issue's target is about 1 s wall).

    python benchmarks/plan_speed.py [JOB.yaml]
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpuwise.hardware.catalog import load_catalog
from gpuwise.plan.candidates import generate
from gpuwise.plan.job import from_jobspec
from gpuwise.plan.planner import plan
from gpuwise.workload.jobspec import load_job

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "llama-3.1-8b-pretrain.yaml"


def scaled(catalog, factor: float):
    offs = catalog.offerings
    if factor < 1:
        step = round(1 / factor)
        new = offs[::step]
    else:
        new = [dataclasses.replace(o, region=o.region if k == 0 else f"{o.region}-x{k}")
               for k in range(int(factor)) for o in offs]
    return dataclasses.replace(catalog, offerings=new)


def fresh(job):
    """The same job with an empty goodput object: its search memo lives as long as the object (a `gpuwise
    plan` process builds one), so each timed plan starts from a new one."""
    from gpuwise.estimate.goodput import JobGoodput

    return dataclasses.replace(job, goodput=JobGoodput(job.space))


def timed(job, cat, repeats: int = 3) -> tuple[float, int, int]:
    times = []
    for _ in range(repeats):
        j = fresh(job)
        t0 = time.perf_counter()
        res = plan(j, cat, "knee")   # a new goodput object per plan (it keeps the search's memory estimates)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), res.candidates.evaluated, len(res.candidates)


def _clear_caches() -> None:
    """Empty the estimate memos, so each timed search starts cold (as in a fresh `gpuwise plan`)."""
    from gpuwise.estimate import memory, roofline_step, step_time

    for mod in (memory, roofline_step, step_time):
        for f in vars(mod).values():
            if hasattr(f, "cache_clear") and f.__module__ != "functools":
                f.cache_clear()


def pruned_vs_exhaustive(job, cat, repeats: int = 3) -> None:
    times: dict[bool, list[float]] = {False: [], True: []}
    results = {}
    for _ in range(repeats):
        for exhaustive in (False, True):
            _clear_caches()
            j = fresh(job)
            t0 = time.process_time()
            results[exhaustive] = generate(j, cat, exhaustive=exhaustive)
            times[exhaustive].append(time.process_time() - t0)
    fast, slow = results[False], results[True]
    same = (fast.shapes == slow.shapes and fast.assumptions == slow.assumptions
            and bool((fast.cost == slow.cost).all()))
    tp, te = statistics.median(times[False]), statistics.median(times[True])
    print(f"candidate generation, cold, CPU s (median of {repeats}, alternating): pruned {tp:.3f} s, "
          f"exhaustive {te:.3f} s: ratio {tp / te:.2f} ({te / tp:.1f}x faster); "
          f"{fast.evaluated:,} configurations either way; same candidates: {same}")


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else JOB
    job = from_jobspec(load_job(path))
    base_cat = load_catalog()
    t0 = time.perf_counter()
    first = plan(job, base_cat, "knee")
    cold = time.perf_counter() - t0
    print(f"job {path.name}; first plan in this process (all caches empty): {cold:.3f} s, "
          f"{first.candidates.evaluated:,} configurations, {first.candidates.evaluated / cold:,.0f}/s")
    base_t, base_eval, _ = timed(job, base_cat)
    print("median of 3 plans per catalog size; ratios vs the 1x catalog in this run")
    print(f"{'catalog':>8} {'offerings':>9} {'configs':>9} {'kept':>7} {'seconds':>8} {'ratio':>6} {'configs/s':>11}")
    for f in (0.25, 0.5, 1, 2, 4):
        cat = base_cat if f == 1 else scaled(base_cat, f)
        t, ev, kept = (base_t, base_eval, None) if f == 1 else timed(job, cat)
        if kept is None:
            kept = len(plan(job, cat, "knee").candidates)
        print(f"{f:>7}x {len(cat.offerings):>9} {ev:>9} {kept:>7} {t:8.3f} {t / base_t:6.2f} {ev / t:11,.0f}")
    pruned_vs_exhaustive(job, base_cat)
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "gpuwise", "plan", str(path), "--json"],
                             capture_output=True, text=True, cwd=ROOT)
        walls.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import gpuwise"], capture_output=True)
    start = time.perf_counter() - t0
    print(f"gpuwise plan {path.name} --json: {statistics.median(walls):.2f} s wall, median of 5 "
          f"(min {min(walls):.2f}, exit {out.returncode}); interpreter + import gpuwise alone: {start:.2f} s; "
          "target about 1 s")
    import os

    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
