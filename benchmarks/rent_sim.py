"""Benchmark: the event-driven cloud simulator (gpuwise.sim.cloud on the shared Engine) against a
vectorised analytic baseline on the same jobs, measured in the same run.

The baseline computes what an unbounded cloud makes trivial to vectorise: response times
(duration of each job) and the time-average rented GPUs (sort the +k/-k level changes and
integrate with cumsum). The ratio says what the event loop costs on top of numpy.

It also times the general path -- the same policy through THE policy interface in the cluster
simulator on an unbounded cluster (gpuwise.sim.cloud_cluster) -- on the first --cluster-jobs jobs,
with the specialised simulator on the same jobs as its baseline: why two paths exist.

    python benchmarks/rent_sim.py [--jobs 1000000] [--cluster-jobs 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
from gpuwise.plan.rent.solver import Budget, solve
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PowerSpeedup
from gpuwise.policies.fixed_width import FixedWidthPolicy
from gpuwise.sim.cloud import job_speeds, poisson_workload, simulate


def vectorised(types, policy, wl, rng):
    width = policy.assign(wl.type_idx, wl.size, rng)
    dur = wl.size / job_speeds(types, wl.type_idx, width)
    horizon = wl.arrival[-1]
    times = np.concatenate([wl.arrival, wl.arrival + dur])
    delta = np.concatenate([width, -width])
    order = np.argsort(times, kind="stable")
    t, d = times[order], delta[order]
    level = np.cumsum(d)
    keep = t < horizon
    seg = np.diff(np.append(t[keep], horizon))
    return float(dur.mean()), float(np.sum(level[keep] * seg) / horizon)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--cluster-jobs", type=int, default=20_000, help="jobs for the general-path comparison")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    dist = SizeDistribution("lognormal", shape=1.5)
    types = [JobType("a", 0.4, dist, AmdahlSpeedup(0.8)), JobType("b", 0.4, dist, PowerSpeedup(0.5))]
    sol = solve(types, Budget(2.0), integer=True)  # whole GPUs: the cluster path allocates GPUs
    policy = FixedWidthPolicy.from_solution(sol)
    wl = poisson_workload(types, args.jobs, np.random.default_rng(args.seed))

    t0 = time.perf_counter()
    v_rt, v_gpus = vectorised(types, policy, wl, np.random.default_rng(1))
    t_vec = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = simulate(types, policy, wl, rng=np.random.default_rng(1))
    t_des = time.perf_counter() - t0

    print(f"jobs: {args.jobs}, events: {r.events}")
    print(f"event-driven simulator: {t_des:.2f} s, {args.jobs / t_des:,.0f} jobs/s "
          f"(E[T] {r.mean_response_time[0]:.4f}, GPUs {r.mean_gpus_rented[0]:.4f})")
    print(f"vectorised baseline:    {t_vec:.2f} s, {args.jobs / t_vec:,.0f} jobs/s "
          f"(E[T] {v_rt:.4f}, GPUs {v_gpus:.4f})")
    print(f"analytic: E[T] {sol.mean_response_time:.4f}, GPUs {sol.budget_used:.4f}")
    print(f"ratio simulator/vectorised time: {t_des / t_vec:.1f}x")

    from gpuwise.sim.cloud import Workload
    from gpuwise.sim.cloud_cluster import simulate_on_cluster

    n = min(args.cluster_jobs, args.jobs)
    sub = Workload(wl.arrival[:n], wl.type_idx[:n], wl.size[:n], wl.source)
    t0 = time.perf_counter()
    a = simulate(types, policy, sub, rng=np.random.default_rng(1))
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    b = simulate_on_cluster(types, policy, sub, rng=np.random.default_rng(1))
    t_gen = time.perf_counter() - t0
    print(f"{n} jobs: specialised {t_fast:.2f} s (E[T] {a.mean_response_time[0]:.6f}, GPUs "
          f"{a.mean_gpus_rented[0]:.6f}); cluster simulator {t_gen:.2f} s (E[T] {b.mean_response_time[0]:.6f}, "
          f"GPUs {b.mean_gpus_rented[0]:.6f}); ratio general/specialised time: {t_gen / t_fast:.1f}x")


if __name__ == "__main__":
    main()
