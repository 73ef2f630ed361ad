"""Metrics of a simulated run: JCT statistics, makespan, completions, drops, GPU-hours,
utilisation over time and per GPU type, per-job results, a fairness figure and the policy's
decision time per round."""

from __future__ import annotations

import numpy as np

from gpuwise.sim.cluster import SimResult


def summarise(res: SimResult) -> dict:
    """The metrics dict printed by `gpuwise simulate/compare` (JSON keys are stable)."""
    done = [j for j in res.jobs if j.status == "done"]
    jct = np.array([j.finish_s - j.submitted_s for j in done], float)
    first = min((j.submitted_s for j in res.jobs), default=0.0)
    last = max((j.finish_s for j in done), default=first)
    dec = np.array(res.decision_s, float) * 1e3
    unbounded = res.cluster.unbounded
    total = res.cluster.total_gpus
    gpu_s = res.gpus_used.integral(res.end_s)
    span = max(res.end_s - first, 1e-9)
    # unbounded (pay-per-use) clusters have no capacity to be a fraction of: report GPUs, not shares
    scale = 1.0 if unbounded else total
    jobs = per_job(res)
    return {
        "policy": res.policy,
        "jobs": len(res.jobs),
        "jobs_completed": len(done),
        "jobs_dropped": sum(1 for j in res.jobs if j.status == "dropped"),
        "jobs_unfinished": sum(1 for j in res.jobs if j.status in ("pending", "running")),
        "mean_jct_s": float(jct.mean()) if len(jct) else None,
        "median_jct_s": float(np.median(jct)) if len(jct) else None,
        "p99_jct_s": float(np.percentile(jct, 99)) if len(jct) else None,
        "makespan_s": float(last - first),
        "gpu_hours": float(gpu_s) / 3600.0,
        "utilisation": None if unbounded else float(gpu_s / (total * span)),
        "mean_gpus_in_use": float(gpu_s / span),
        "peak_gpus_used": int(res.gpus_used.peak),
        "mean_queue_len": float(res.queue_len.mean(res.end_s)),
        "restarts": int(sum(max(0, j.restarts - 1) for j in res.jobs)),
        "rounds": len(dec),
        "mean_decision_ms": float(dec.mean()) if len(dec) else 0.0,
        "p99_decision_ms": float(np.percentile(dec, 99)) if len(dec) else 0.0,
        "max_decision_ms": float(dec.max()) if len(dec) else 0.0,
        # the PerfModel's evaluation for the policy (goodput tables), excluded from decision time
        "mean_model_ms": float(np.mean(res.model_s) * 1e3) if len(res.model_s) else 0.0,
        "max_model_ms": float(np.max(res.model_s) * 1e3) if len(res.model_s) else 0.0,
        "sim_wall_s": res.wall_s,
        "events": res.events,
        "cluster": res.cluster.name,
        "cluster_gpus": None if unbounded else total,
        "seed": res.seed,
        # fraction of the cluster busy; unbounded clusters: GPUs rented
        "utilisation_over_time": [[t, v / scale] for t, v in _downsample(res.gpu_series, res.end_s, 50)],
        "utilisation_by_type": utilisation_by_type(res, span),
        "fairness": fairness(jobs),
        "per_job": jobs,
        "assumptions": list(res.assumptions),
        # rounds by HiGHS status, fallbacks and the worst MIP gap (policies that solve a program)
        "solver": res.solver,
    }


def solver_line(name: str, solver: dict | None) -> str | None:
    """One line on a policy's solves: rounds by HiGHS status, fallbacks, worst MIP gap."""
    if not solver or not solver["rounds"]:
        return None
    by = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(solver["by_status"].items()))
    gap = solver["worst_mip_gap"]
    worst = "none returned" if gap is None else f"{100 * gap:.3g}%"
    return (f"{name}: {solver['rounds']} HiGHS solves ({by}); {solver['fallback_rounds']} fell back to the "
            f"stated rule; worst MIP gap {worst}")


FAIRNESS_DEFINITION = ("fairness: Jain's index (sum x)^2 / (n sum x^2) over completed jobs of the slowdown x = JCT / "
                       "time from the job's first start to its finish (1 = every job delayed by the same factor; "
                       "it sees waiting, not how many GPUs a job was given)")


def per_job(res: SimResult) -> list[dict]:
    """One row per job, in arrival order: wait (submission to first start), run (first start to
    finish), JCT, every allocation it ran on, and its GPU-hours per type."""
    rows = []
    for j in sorted(res.jobs, key=lambda j: (j.submitted_s, j.name)):
        u = res.usage.jobs.get(j.name)
        start = u.first_start_s if u else None
        done = j.status == "done" and j.finish_s is not None
        rows.append({
            "job": j.name, "status": j.status, "submitted_s": j.submitted_s, "start_s": start,
            "finish_s": j.finish_s if done else None,
            "wait_s": None if start is None else start - j.submitted_s,
            "run_s": (j.finish_s - start) if done and start is not None else None,
            "jct_s": (j.finish_s - j.submitted_s) if done else None,
            "allocations": [{"at_s": t, "gpu_type": g, "gpus": n, "layout": lay}
                            for t, g, n, lay in (u.allocations if u else [])],
            "gpu_hours_by_type": {g: v / 3600.0 for g, v in (u.gpu_s if u else {}).items()},
        })
    return rows


def utilisation_by_type(res: SimResult, span: float) -> dict[str, dict]:
    """Per GPU type of the cluster: GPUs, GPU-hours allocated and the busy fraction over the run
    (None on an unbounded cluster, which has no capacity to be a fraction of)."""
    out = {}
    for t in res.cluster.gpu_types:
        gpu_s = res.usage.gpu_s_by_type.get(t, 0.0)
        cap = None if res.cluster.unbounded else res.cluster.gpus_of_type(t)
        out[t] = {"gpus": cap, "gpu_hours": gpu_s / 3600.0,
                  "utilisation": None if not cap else gpu_s / (cap * span)}
    return out


def fairness(rows: list[dict]) -> dict:
    """Jain's index over completed jobs' slowdowns (FAIRNESS_DEFINITION), with their mean and max."""
    x = np.array([r["jct_s"] / r["run_s"] for r in rows if r["jct_s"] is not None and r["run_s"]], float)
    if not len(x):
        return {"jain_index": None, "mean_slowdown": None, "max_slowdown": None, "jobs": 0,
                "definition": FAIRNESS_DEFINITION}
    return {"jain_index": float(x.sum() ** 2 / (len(x) * (x ** 2).sum())), "mean_slowdown": float(x.mean()),
            "max_slowdown": float(x.max()), "jobs": int(len(x)), "definition": FAIRNESS_DEFINITION}


def _downsample(series, end: float, points: int) -> list[tuple[float, float]]:
    """At most ``points`` (time, level) pairs of a step function, ending at ``end``."""
    pts = list(series) + ([(end, series[-1][1])] if series else [])
    if not pts:
        return []
    idx = sorted(set(np.linspace(0, len(pts) - 1, min(points, len(pts))).round().astype(int).tolist()))
    return [(float(pts[i][0]), float(pts[i][1])) for i in idx]


def series(res: SimResult) -> dict:
    """Time series and distributions for plots."""
    done = [j for j in res.jobs if j.status == "done"]
    return {
        "jct_s": sorted(j.finish_s - j.submitted_s for j in done),
        "jct_by_job": {j.name: j.finish_s - j.submitted_s for j in done},
        "gpus_used": _downsample(res.gpu_series, res.end_s, 4000),
        "queue_len": _downsample(res.queue_series, res.end_s, 4000),
    }


def common_jct(jct_by_job: dict[str, dict[str, float]]) -> tuple[int, dict[str, float | None]]:
    """Mean JCT of each run over the jobs that *every* run completed: a like-for-like view when
    drop admission lets policies complete different job sets. ``jct_by_job``: run -> job -> JCT.
    Returns (number of common jobs, run -> mean JCT in seconds or None)."""
    sets = [set(d) for d in jct_by_job.values()]
    common = set.intersection(*sets) if sets else set()
    return len(common), {k: (float(np.mean([d[n] for n in common])) if common else None)
                         for k, d in jct_by_job.items()}
