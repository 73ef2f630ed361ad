"""Decision time at scale (issue 13): one scheduling round on a 2,000-GPU, three-type cluster
(100 x 8 T4, 100 x 8 V100, 50 x 8 A100) with 1,000 active jobs (500 running on 1-8 GPUs, 500
waiting), resampled from the bundled Pollux workloads. Prints each policy's wall and CPU seconds for
the round and Sia's solve time as a ratio over elastic-DP's and Frenzy's decision times, all
measured in this run. Frenzy is timed cold (building every plan list) and warm (its cached plans,
the steady state of a long run).

Then the 82k-job Philly trace on 512 V100s under each cheap policy: simulation wall and CPU time
(each policy in its own process, stopped after 120 s of wall time).

With ``--philly-round`` instead: one round of fifo, frenzy, elastic-dp, pollux and sia at the Philly
trace's busiest instant under fifo (the jobs then waiting or running), CPU time as a ratio over
elastic-dp's and Frenzy's rounds in the same run -- the per-round cost of the expensive policies on Philly, which a full
82k-job run with 60 s rounds over months of trace time cannot give cheaply.

With ``--llm``: the same round with 1,000 LLM jobs that need sharding (Llama-3.1-8B and 70B,
pre-training and LoRA: examples/workloads/specs) on 2,000 GPUs (100 x 8 H100, 75 x 8 H200,
75 x 8 A100-80GB). Their goodput tables come from each spec's goodput object (the planner's layout
search); building them is model evaluation, timed apart (`gpuwise.control.timed_perf`), and the
decision times exclude it. Frenzy's and elastic-DP's rounds are compared with Sia's ILP in this run.

Run: PYTHONPATH=$PWD nice -n 10 python benchmarks/sched_scale.py [--skip-philly | --philly-round | --llm]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from _streams import pollux_job_pool
from gpuwise.data import data_path
from gpuwise.hardware.cluster import load_cluster, make_cluster
from gpuwise.policies.base import Allocation, ClusterState, JobState, SchedView, check_decision
from gpuwise.policies.placement import whole_node_fit
from gpuwise.policies.registry import make_policy
from gpuwise.sim.ground_truth import GroundTruthPerf
from gpuwise.workload.traces import TraceJob

CHEAP = ("fifo", "first-fit", "las", "frenzy", "elastic-dp", "optimus", "pollux")


def big_view(jobs: int = 1000, running: int = 500, seed: int = 0):
    cluster = make_cluster([("T4", 100, 8), ("V100", 100, 8), ("A100", 50, 8)], name="scale-2000")
    perf = GroundTruthPerf(cluster)
    rng = np.random.default_rng(seed)
    pool = pollux_job_pool()
    state = ClusterState(cluster)
    pending, run = {}, {}
    for i in range(jobs):
        app, n, b = pool[int(rng.integers(len(pool)))]
        job = TraceJob(f"{app}-{i}", float(i), n, application=app, batch_size=b)
        js = JobState(job=job, submitted_s=-3600.0 + i, target=perf.target(job))
        t = cluster.gpu_types[i % 3]
        pl = whole_node_fit(state, t, 1 << int(rng.integers(0, 4))) if len(run) < running else None
        lo, hi, _ = perf.batch_range(job, t)
        _seat(js, state, t, pl, int(min(max(b, lo), hi)), rng, run, pending)
    return cluster, perf, SchedView(pending, run, state, list(pending))


def _seat(js, state, t, pl, batch, rng, run, pending) -> None:
    """Start ``js`` on placement ``pl`` part-way through its work, or leave it waiting (``pl`` None)."""
    if pl is None:
        pending[js.name] = js
        return
    js.allocation = Allocation(t, pl, batch)
    state.allocate(js.allocation)
    js.status, js.restarts = "running", 1
    js.progress = float(rng.uniform(0, 0.8)) * js.target
    run[js.name] = js


def timed(policy, view, perf) -> tuple[float, float]:
    """Wall and CPU seconds of one round, less the time the PerfModel spent evaluating (goodput tables)."""
    from gpuwise.control.timed_perf import TimedPerf

    tp = perf if isinstance(perf, TimedPerf) else TimedPerf(perf)
    m0, mc0 = tp.seconds, tp.cpu_seconds
    w, c = time.perf_counter(), time.process_time()
    d = policy.schedule(0.0, view, tp)
    w = time.perf_counter() - w - (tp.seconds - m0)
    c = time.process_time() - c - (tp.cpu_seconds - mc0)
    check_decision(view, d)
    return w, c


LLM_SPECS = ("llama-3.1-8b-pretrain-2b", "llama-3.1-70b-pretrain-2b", "llama-3.1-8b-lora", "llama-3.1-70b-lora")


def llm_view(jobs: int = 1000, running: int = 500, seed: int = 0):
    """1,000 LLM jobs (half running on a layout their goodput object says fits) on 2,000 GPUs."""
    cluster = make_cluster([("H100", 100, 8), ("H200", 75, 8), ("A100-80GB", 75, 8)], name="llm-2000")
    perf = GroundTruthPerf(cluster)
    rng = np.random.default_rng(seed)
    state = ClusterState(cluster)
    pending, run = {}, {}
    for i in range(jobs):
        spec = LLM_SPECS[int(rng.integers(len(LLM_SPECS)))]
        path = f"examples/workloads/specs/{spec}.yaml"
        n = int(8 * 2 ** rng.integers(0, 3))
        job = TraceJob(f"{spec}-{i}", float(i), n, jobspec=path)
        js = JobState(job=job, submitted_s=-3600.0 + i, target=perf.target(job))
        t = cluster.gpu_types[i % 3]
        lo = perf.batch_range(job, t)[0]
        fits = lo >= 1 and perf.rates(job, t, n, n // 8, lo)[0] > 0
        pl = whole_node_fit(state, t, n) if len(run) < running and fits else None
        _seat(js, state, t, pl, lo, rng, run, pending)
    return cluster, perf, SchedView(pending, run, state, list(pending))


def llm_scale() -> None:
    from gpuwise.control.timed_perf import TimedPerf

    t0 = time.perf_counter()
    cluster, perf, view = llm_view()
    perf = TimedPerf(perf)
    print(f"{cluster.name}: {cluster.total_gpus} GPUs, {len(view.running)} running + {len(view.pending)} waiting "
          f"LLM jobs (set up in {time.perf_counter() - t0:.1f} s)", flush=True)
    t = {}
    fr = make_policy("frenzy")
    t["frenzy (cold)"] = timed(fr, view, perf)
    print(f"  model evaluation (goodput tables, cold): {perf.seconds:.1f} s", flush=True)
    t["frenzy (warm)"] = timed(fr, view, perf)
    t["elastic-dp"] = timed(make_policy("elastic-dp"), view, perf)
    sia = make_policy("sia")
    sia.time_limit_s = 120.0
    t["sia"] = timed(sia, view, perf)
    print(f"  model evaluation in all: {perf.seconds:.1f} s wall, {perf.cpu_seconds:.1f} s CPU (excluded below)")
    for k, (w, c) in t.items():
        print(f"  {k:14s} {w * 1e3:10.1f} ms wall  {c * 1e3:10.1f} ms CPU")
    for i, unit in ((0, "wall"), (1, "CPU")):
        s = t["sia"][i]
        print("  sia / frenzy cold = {:.0f}x, sia / frenzy warm = {:.0f}x, sia / elastic-dp = {:.0f}x ({})".format(
            s / t["frenzy (cold)"][i], s / t["frenzy (warm)"][i], s / t["elastic-dp"][i], unit))


def scale() -> None:
    cluster, perf, view = big_view()
    print(f"{cluster.name}: {cluster.total_gpus} GPUs, {len(view.running)} running + {len(view.pending)} waiting jobs")
    t = {}
    fr = make_policy("frenzy")
    t["frenzy (cold)"] = timed(fr, view, perf)
    t["frenzy (warm)"] = timed(fr, view, perf)
    t["elastic-dp"] = timed(make_policy("elastic-dp"), view, perf)
    sia = make_policy("sia")
    sia.time_limit_s = 120.0
    t["sia"] = timed(sia, view, perf)
    for k, (w, c) in t.items():
        print(f"  {k:14s} {w:8.3f} s wall  {c:8.3f} s CPU")
    s = t["sia"][0]
    for i, unit in ((0, "wall"), (1, "CPU")):
        s = t["sia"][i]
        print("  sia / elastic-dp = {:.0f}x, sia / frenzy cold = {:.0f}x, sia / frenzy warm = {:.0f}x ({})".format(
            s / t["elastic-dp"][i], s / t["frenzy (cold)"][i], s / t["frenzy (warm)"][i], unit))


def _philly_one(name: str, q) -> None:
    from gpuwise.sim.cluster import simulate
    from gpuwise.sim.metrics import summarise
    from gpuwise.workload.traces import load_workload

    w = load_workload(data_path("pollux", "traces", "philly.csv"))
    cl = load_cluster("examples/clusters/philly-512.yaml")
    t0, c0 = time.perf_counter(), time.process_time()
    m = summarise(simulate(cl, w, make_policy(name)))
    q.put((len(w), time.perf_counter() - t0, time.process_time() - c0, m))


def philly(budget_s: float = 120.0) -> None:
    """Each cheap policy in its own process, stopped after ``budget_s`` seconds of wall time."""
    import multiprocessing as mp

    base = None
    for name in CHEAP:
        q = mp.Queue()
        p = mp.Process(target=_philly_one, args=(name, q))
        p.start()
        p.join(budget_s)
        if p.is_alive():
            p.terminate()
            p.join()
            print(f"  philly, {name:10s}: not finished within {budget_s:.0f} s wall", flush=True)
            continue
        jobs, wall, cpu, m = q.get()
        base = base or wall
        print(f"  philly {jobs} jobs, {name:10s}: {wall:7.1f} s wall, {cpu:7.1f} s CPU ({wall / base:.1f}x fifo), "
              f"{m['rounds']} rounds, mean decision {m['mean_decision_ms']:.3f} ms, mean JCT {m['mean_jct_s'] / 3600:.2f} h",
              flush=True)


def philly_view():
    """The Philly trace's busiest instant under fifo (most jobs waiting or running): those jobs, the
    running ones on their GPUs (best fit, as fifo placed them) with the progress they had made."""
    from gpuwise.policies.placement import best_fit
    from gpuwise.sim.cluster import simulate
    from gpuwise.workload.traces import load_workload

    w = load_workload(data_path("pollux", "traces", "philly.csv"))
    cl = load_cluster("examples/clusters/philly-512.yaml")
    res = simulate(cl, w, make_policy("fifo"))
    done = [js for js in res.jobs if js.finish_s is not None]
    # rigid jobs under fifo run once, at full speed: start = finish - duration - restart
    span = [(js, js.finish_s - js.job.duration_s - res.restart_s) for js in done]
    events = sorted([(js.submitted_s, 1) for js, _ in span] + [(js.finish_s, -1) for js, _ in span])
    active, best, at = 0, -1, 0.0
    for t, d in events:
        active += d
        if active > best:
            best, at = active, t
    perf = GroundTruthPerf(cl)
    state = ClusterState(cl)
    gpu = cl.gpu_types[0]
    pending, run = {}, {}
    for js, start in sorted(span, key=lambda x: x[1]):
        if not js.submitted_s <= at < js.finish_s:
            continue
        fresh = JobState(job=js.job, submitted_s=js.submitted_s, target=perf.target(js.job))
        pl = best_fit(state, gpu, js.job.num_gpus) if start <= at else None
        if pl is not None:
            fresh.allocation = Allocation(gpu, pl, None)
            state.allocate(fresh.allocation)
            fresh.status, fresh.restarts = "running", 1
            fresh.progress = max(0.0, at - start - res.restart_s)
            fresh.attained_gpu_s = fresh.progress * js.job.num_gpus
            run[js.job.name] = fresh
        else:
            pending[js.job.name] = fresh
    return cl, perf, SchedView(pending, run, state, list(pending)), at


def philly_round() -> None:
    """One round of each policy at Philly's busiest instant; CPU ratios over elastic-dp's and Frenzy's
    rounds in the same run (fifo's round is near zero: the cluster is full, its head does not fit)."""
    cl, perf, view, at = philly_view()
    print(f"philly at {at / 86400:.1f} days (fifo's busiest instant): {len(view.running)} running + "
          f"{len(view.pending)} waiting jobs on {cl.total_gpus} GPUs")
    t = {name: timed(make_policy(name), view, perf) for name in ("fifo", "frenzy", "elastic-dp", "pollux", "sia")}
    for k, (w, c) in t.items():
        print(f"  {k:12s} {w:8.3f} s wall  {c:8.3f} s CPU  ({c / t['elastic-dp'][1]:.1f}x elastic-dp's, "
              f"{c / t['frenzy'][1]:.1f}x frenzy's CPU)")


if __name__ == "__main__":
    if "--philly-round" in sys.argv:
        philly_round()
        sys.exit()
    if "--llm" in sys.argv:
        llm_scale()
        sys.exit()
    scale()
    if "--skip-philly" not in sys.argv:
        philly()
