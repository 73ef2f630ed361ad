"""Human tables of `gpuwise simulate` and `compare`: the metrics per policy (with utilisation per GPU
type and the fairness figure) and each job's wait, run, GPUs and JCT."""

from __future__ import annotations

# (JSON key, a dotted path into the metrics dict; row title; format: "h" hours, "dur" adaptive unit)
ROWS = (("jobs_completed", "jobs completed", "{:d}"), ("jobs_dropped", "jobs dropped", "{:d}"),
        ("jobs_unfinished", "jobs unfinished", "{:d}"),
        ("mean_jct_s", "mean JCT (h)", "h"), ("median_jct_s", "median JCT (h)", "h"),
        ("p99_jct_s", "p99 JCT (h)", "h"), ("makespan_s", "makespan (h)", "h"),
        ("gpu_hours", "GPU-hours", "{:.0f}"), ("utilisation", "utilisation", "{:.0%}"),
        ("mean_gpus_in_use", "mean GPUs in use", "{:.1f}"),
        ("fairness.jain_index", "fairness: Jain's index of slowdowns", "{:.3f}"),
        ("fairness.max_slowdown", "max slowdown (JCT / run)", "{:.2f}"),
        ("mean_queue_len", "mean queue length", "{:.1f}"), ("restarts", "restarts/rescales", "{:d}"),
        ("rounds", "policy rounds", "{:d}"), ("mean_decision_ms", "mean decision (ms)", "{:.3f}"),
        ("p99_decision_ms", "p99 decision (ms)", "{:.3f}"), ("sim_wall_s", "simulation wall (s)", "{:.2f}"))


def value(metrics: dict, key: str):
    for part in key.split("."):
        metrics = metrics.get(part) if isinstance(metrics, dict) else None
    return metrics


def fmt(v, how: str) -> str:
    if v is None:
        return "-"
    if how == "h":
        return f"{v / 3600:.2f}"
    if how == "dur":
        return duration(v)
    return how.format(v)


def duration(seconds: float) -> str:
    """Seconds in the unit the plots use for a run that long (`gpuwise.sim.plots.time_unit`)."""
    from gpuwise.sim.plots import time_unit

    unit, per = time_unit(seconds)
    return f"{seconds / per:.{_DIGITS[unit]}f} {unit}"


_DIGITS = {"s": 0, "min": 1, "h": 2}


def metric_rows(metrics: dict[str, dict], extra: tuple = ()) -> list[tuple]:
    """Rows of the metrics table, one column per policy; utilisation per GPU type after the total."""
    names = list(metrics)
    rows = list(ROWS)
    for i, row in enumerate(extra):
        rows.insert(4 + i, row)
    types = list(next(iter(metrics.values())).get("utilisation_by_type") or {})
    at = next(i for i, r in enumerate(rows) if r[0] == "utilisation") + 1
    if len(types) > 1:
        rows[at:at] = [(f"utilisation_by_type.{t}.utilisation", f"  {t} utilisation", "{:.0%}") for t in types]
    return [(title, *(fmt(value(metrics[n], key), how) for n in names)) for key, title, how in rows]


def gpus_text(allocations: list[dict]) -> str:
    """'4 x T4'; a job that ran on several allocations: the range per GPU type, '2-52 x T4 (4 allocations)'."""
    if not allocations:
        return "-"
    counts: dict[str, list[int]] = {}
    for a in allocations:
        counts.setdefault(a["gpu_type"], []).append(a["gpus"])
    parts = [f"{min(c)}-{max(c)} x {t}" if min(c) != max(c) else f"{c[0]} x {t}" for t, c in counts.items()]
    return ", ".join(parts) + (f" ({len(allocations)} allocations)" if len(allocations) > 1 else "")


def print_jobs(title: str, rows: list[dict], limit: int) -> None:
    """The first ``limit`` jobs in arrival order (wait, run, GPUs, JCT); the rest are in --json."""
    from gpuwise.cli.output import print_table

    if limit <= 0 or not rows:
        return
    print_table(f"{title}: per job, in arrival order", ["job", "status", "wait", "run", "GPUs", "JCT"],
                [(r["job"], r["status"], fmt(r["wait_s"], "dur"), fmt(r["run_s"], "dur"),
                  gpus_text(r["allocations"]), fmt(r["jct_s"], "dur")) for r in rows[:limit]])
    if len(rows) > limit:
        print(f"  ... {len(rows) - limit} more jobs: --show-jobs {len(rows)}, or --json (per_job)")
