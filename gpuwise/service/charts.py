"""The dashboard's charts, drawn by matplotlib on the server as inline SVG (no JavaScript, no CDN).

Each function returns a matplotlib `Figure` (so tests can measure its layout) and `svg` turns one
into markup. Figures are built without pyplot (no global figure registry) and drawn under one lock:
matplotlib's rc state is process-wide and the server renders from several threads. Legends sit
outside the axes and the layout is constrained, so ticks, labels and legends never overlap the data
or each other. Artists carry a ``gid`` (an ``id`` in the SVG) that the browser test looks for.
"""

from __future__ import annotations

import io
import threading

_LOCK = threading.Lock()
SIZE = (5.6, 2.7)   # inches at 100 dpi: two charts side by side in a 1200 px window


def time_unit(span_s: float) -> tuple[float, str]:
    """Seconds per plotted unit and its name, so short runs read in seconds and long ones in hours."""
    if span_s < 300:
        return 1.0, "s"
    if span_s < 3 * 3600:
        return 60.0, "min"
    return 3600.0, "h"


def _figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=SIZE, dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, lw=0.4, alpha=0.5)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, borderaxespad=0)


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="#555", fontsize=10)
    ax.set_axis_off()


def usage_figure(series: list[dict], capacity: dict[str, int], clock_s: float):
    """GPUs in use per GPU type over the backend clock (step lines), capacity dashed."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure()
    by_type: dict[str, list[tuple[float, int]]] = {t: [] for t in capacity}
    for r in series:
        by_type.setdefault(r["gpu_type"], []).append((float(r["at_sim"]), int(r["used"])))
    end = max([clock_s] + [p[0] for pts in by_type.values() for p in pts]) or 1.0
    div, unit = time_unit(end)
    for k, (gpu, pts) in enumerate(sorted(by_type.items())):
        color = f"C{k % 10}"
        xs = [0.0] + [p[0] / div for p in pts] + [end / div]
        ys = [0] + [p[1] for p in pts] + [pts[-1][1] if pts else 0]
        ax.step(xs, ys, where="post", color=color, lw=1.6, label=f"{gpu} (of {capacity.get(gpu, 0)})",
                gid=f"usage-{gpu}")
        if gpu in capacity:
            ax.axhline(capacity[gpu], color=color, lw=0.8, ls="--")
    ax.set_xlim(0, end / div)
    ax.set_ylim(0, max(list(capacity.values()) + [1]) * 1.08)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"backend clock ({unit})")
    ax.set_ylabel("GPUs in use")
    _legend(ax)
    return fig


def jct_figure(jcts_s: list[float], bins: int = 12):
    """Histogram of finished jobs' completion times (submission to finish, backend clock)."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure()
    if not jcts_s:
        _note(ax, "no finished jobs yet")
        return fig
    div, unit = time_unit(max(jcts_s))
    ax.hist([j / div for j in jcts_s], bins=bins, color="C0", edgecolor="white", gid="jct-bars")
    ax.set_xlim(left=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"job completion time ({unit})")
    ax.set_ylabel("jobs")
    return fig


def progress_figure(actual: list[tuple[float, float]], predicted: tuple[float, float] | None,
                    projected: tuple[float, float, float] | None):
    """A job's progress (%) over the backend clock: recorded points, the prediction's line from the
    start to the predicted finish, and the projection from now to the measured ETA (dashed)."""
    fig, ax = _figure()
    xs = [t for t, _ in actual] + ([predicted[1]] if predicted else []) + ([projected[2]] if projected else [])
    if not xs:
        _note(ax, "not started yet")
        return fig
    div, unit = time_unit(max(xs) - min(xs))
    if actual:
        ax.plot([t / div for t, _ in actual], [100 * p for _, p in actual], "o-", color="C0", ms=3, lw=1.6,
                label="recorded", gid="progress-actual")
    if predicted:
        ax.plot([predicted[0] / div, predicted[1] / div], [0, 100], color="C1", lw=1.2,
                label="predicted", gid="progress-predicted")
    if projected:
        now, p, eta = projected
        ax.plot([now / div, eta / div], [100 * p, 100], ls="--", color="C0", lw=1.2, label="projected (measured speed)",
                gid="progress-projected")
    ax.set_ylim(0, 105)
    ax.set_xlabel(f"backend clock ({unit})")
    ax.set_ylabel("progress (%)")
    _legend(ax)
    return fig


def loss_figure(losses: list[tuple[int, float]]):
    """Training loss per optimizer step, as the backend's workers reported it."""
    fig, ax = _figure()
    if not losses:
        _note(ax, "no losses recorded for this job")
        return fig
    ax.plot([s for s, _ in losses], [v for _, v in losses], color="C2", lw=1.4, label="training loss",
            gid="loss-curve")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats)")
    return fig


def svg(fig, element_id: str) -> str:
    """The figure as inline SVG markup inside ``<div id=element_id class="chart">``."""
    buf = io.StringIO()
    with _LOCK:
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]      # drop the XML prolog and DOCTYPE: it is inlined in HTML
    return f'<div id="{element_id}" class="chart">{text}</div>'
