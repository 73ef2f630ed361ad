"""Plots of simulated runs: JCT CDF, GPUs in use over time, queue length over time."""

from __future__ import annotations

from pathlib import Path


def write_plots(runs: dict[str, dict], out_dir: str | Path, total_gpus: int | None) -> list[str]:
    """``runs``: policy name -> `metrics.series` dict; ``total_gpus``: the capacity line on the
    GPUs-in-use plot (None for an unbounded cluster). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in runs.items():
        jct = np.asarray(s["jct_s"], float) / 3600
        if len(jct):
            ax.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of completed jobs")
    ax.set_title("JCT CDF")
    ax.legend()
    files.append(str(out / "jct_cdf.png"))
    fig.tight_layout()
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    for key, label, fname in (("gpus_used", "GPUs in use", "gpus_in_use.png"),
                              ("queue_len", "jobs waiting", "queue_length.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, s in runs.items():
            pts = s[key]
            if pts:
                t = np.array([p[0] for p in pts]) / 3600
                v = np.array([p[1] for p in pts])
                ax.step(t, v, where="post", label=name)
        if key == "gpus_used" and total_gpus:
            ax.axhline(total_gpus, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("time (h)")
        ax.set_ylabel(label)
        ax.set_title(f"{label} over time")
        ax.legend()
        files.append(str(out / fname))
        fig.tight_layout()
        fig.savefig(files[-1], dpi=120)
        plt.close(fig)
    return files
