"""Plots of simulated runs: JCT CDF, GPUs in use over time, queue length over time.

Times are drawn in the unit the run's length reads best in (a 20-minute run in minutes, a
40-second one in seconds), and counts start at zero (an all-zero queue is a flat line on the axis,
not a line in the middle of a -0.05..0.05 range)."""

from __future__ import annotations

from pathlib import Path

# (unit, seconds per unit, the largest span in seconds drawn in that unit)
_UNITS = (("s", 1.0, 120.0), ("min", 60.0, 7200.0), ("h", 3600.0, float("inf")))


def time_unit(max_s: float) -> tuple[str, float]:
    """(unit name, seconds per unit) for times up to ``max_s`` seconds."""
    return next((u, per) for u, per, upto in _UNITS if max_s <= upto)


def jct_figure(runs: dict[str, dict]):
    """Step CDF of each run's JCTs (log time axis)."""
    import matplotlib.pyplot as plt
    import numpy as np

    unit, per = time_unit(max((max(s["jct_s"], default=0.0) for s in runs.values()), default=0.0))
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in runs.items():
        jct = np.asarray(s["jct_s"], float) / per
        if len(jct):
            ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=name)
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"job completion time ({unit})")
    ax.set_ylabel("fraction of completed jobs")
    ax.set_title("JCT CDF")
    ax.legend()
    return fig


def level_figure(runs: dict[str, dict], key: str, label: str, capacity: int | None = None):
    """A step line per run of ``key`` (``gpus_used`` or ``queue_len``: (time s, level) pairs)."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    end = max((s[key][-1][0] for s in runs.values() if s[key]), default=0.0)
    unit, per = time_unit(end)
    fig, ax = plt.subplots(figsize=(6, 4))
    top = capacity or 0
    for name, s in runs.items():
        if s[key]:
            t = np.array([p[0] for p in s[key]]) / per
            v = np.array([p[1] for p in s[key]])
            ax.step(t, v, where="post", label=name)
            top = max(top, float(v.max()))
    if capacity:
        ax.axhline(capacity, color="grey", lw=0.8, ls="--")
    ax.set_ylim(0, max(1.0, top) * 1.05)   # counts: never below zero, whole numbers on the axis
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=0)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel(label)
    ax.set_title(f"{label} over time")
    ax.legend()
    return fig


def write_plots(runs: dict[str, dict], out_dir: str | Path, total_gpus: int | None) -> list[str]:
    """``runs``: policy name -> `metrics.series` dict; ``total_gpus``: the capacity line on the
    GPUs-in-use plot (None for an unbounded cluster). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"jct_cdf.png": jct_figure(runs),
               "gpus_in_use.png": level_figure(runs, "gpus_used", "GPUs in use", total_gpus),
               "queue_length.png": level_figure(runs, "queue_len", "jobs waiting")}
    files = []
    for fname, fig in figures.items():
        files.append(str(out / fname))
        fig.tight_layout()
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    return files
