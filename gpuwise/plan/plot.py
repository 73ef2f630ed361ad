"""Time/cost plane of a plan: every candidate, the Pareto front, its knee and the chosen point."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuwise.errors import InputError


def plot_plan(res, path: str | Path) -> Path:
    """Write a PNG or SVG (by extension) with matplotlib's Agg backend."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError("--plot", str(path), "give a file name ending in .png or .svg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = res.candidates
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ok = cs.ok
    gpus = np.array([cs.offerings[i].gpu for i in cs.off_idx]) if len(cs) else np.array([])
    for g in sorted(set(gpus.tolist())):
        for spot, marker in ((False, "o"), (True, "^")):
            sel = ok & (gpus == g) & (cs.spot == spot)
            if sel.any():
                ax.scatter(cs.time_h[sel], cs.cost[sel], s=10, alpha=0.35, marker=marker,
                           label=f"{g} {'spot' if spot else 'on-demand'}")
    bad = ~ok
    if bad.any():
        ax.scatter(cs.time_h[bad], cs.cost[bad], s=6, c="lightgrey", alpha=0.4, label="breaks a constraint")
    if res.pareto:
        f = np.array(res.pareto)
        ax.plot(cs.time_h[f], cs.cost[f], "k-", lw=1.2, label="Pareto front")
    if res.knee is not None:
        ax.scatter([cs.time_h[res.knee]], [cs.cost[res.knee]], s=140, facecolors="none",
                   edgecolors="tab:red", linewidths=2, label="knee (Kneedle)")
    if res.chosen is not None:
        ax.scatter([cs.time_h[res.chosen]], [cs.cost[res.chosen]], s=160, marker="*", c="gold",
                   edgecolors="k", zorder=5, label=f"chosen ({res.objective})")
    if res.job.deadline_hours:
        ax.axvline(res.job.deadline_hours, color="tab:orange", ls="--", lw=1, label="deadline")
    if res.job.budget_usd:
        ax.axhline(res.job.budget_usd, color="tab:purple", ls="--", lw=1, label="budget")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("expected time to target (hours)")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"gpuwise plan: {res.job.name}")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
