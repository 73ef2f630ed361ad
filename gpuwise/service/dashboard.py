"""The dashboard: one server-rendered HTML page with inline SVG charts (no JavaScript).

Jobs with state, GPUs and progress; GPUs in use over time per GPU type (step lines from the
store's usage series); the distribution of job completion times of finished jobs (histogram).
"""

from __future__ import annotations

from html import escape

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
W, H, PAD = 560, 220, 40


def _axis(xmax: float, ymax: float, xlabel: str, ylabel: str) -> str:
    return (f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 10}" y2="{H - PAD}" stroke="#333"/>'
            f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>'
            f'<text x="{W // 2}" y="{H - 8}" font-size="12" text-anchor="middle">{escape(xlabel)} (0 - {xmax:.3g})</text>'
            f'<text x="12" y="{H // 2}" font-size="12" transform="rotate(-90 12 {H // 2})" text-anchor="middle">'
            f'{escape(ylabel)} (max {ymax:.3g})</text>')


def usage_svg(series: list[dict], capacity: dict[str, int]) -> str:
    """GPUs in use per type over (backend) time, as step lines."""
    by_type: dict[str, list[tuple[float, int]]] = {t: [] for t in capacity}
    for r in series:
        by_type.setdefault(r["gpu_type"], []).append((float(r["at_sim"]), int(r["used"])))
    t_end = max((p[0] for pts in by_type.values() for p in pts), default=1.0) or 1.0
    ymax = max(list(capacity.values()) + [1])
    sx = lambda t: PAD + (W - PAD - 10) * t / t_end  # noqa: E731
    sy = lambda u: (H - PAD) - (H - PAD - 10) * u / ymax  # noqa: E731
    parts = [_axis(t_end, ymax, "time s", "GPUs in use")]
    for k, (t, pts) in enumerate(by_type.items()):
        color = COLORS[k % len(COLORS)]
        d, last = [f"M{sx(0):.1f},{sy(0):.1f}"], 0
        for at, used in pts:
            d.append(f"L{sx(at):.1f},{sy(last):.1f} L{sx(at):.1f},{sy(used):.1f}")
            last = used
        d.append(f"L{sx(t_end):.1f},{sy(last):.1f}")
        parts.append(f'<path class="usage" data-gpu="{escape(t)}" d="{" ".join(d)}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(f'<text x="{W - 150}" y="{20 + 14 * k}" font-size="12" fill="{color}">{escape(t)} '
                     f'(of {capacity.get(t, 0)})</text>')
    return f'<svg id="usage" width="{W}" height="{H}" viewBox="0 0 {W} {H}">{"".join(parts)}</svg>'


def jct_svg(jcts: list[float], bins: int = 12) -> str:
    """Histogram of job completion times (seconds of backend time)."""
    if not jcts:
        return f'<svg id="jct" width="{W}" height="{H}"><text x="{PAD}" y="{H // 2}">no finished jobs yet</text></svg>'
    top = max(jcts) * 1.0001 or 1.0
    counts = [0] * bins
    for j in jcts:
        counts[min(bins - 1, int(j / top * bins))] += 1
    ymax = max(counts)
    bw = (W - PAD - 10) / bins
    parts = [_axis(top, ymax, "JCT s", "jobs")]
    for i, c in enumerate(counts):
        h = (H - PAD - 10) * c / ymax
        parts.append(f'<rect class="bar" x="{PAD + i * bw + 1:.1f}" y="{H - PAD - h:.1f}" width="{bw - 2:.1f}" '
                     f'height="{h:.1f}" fill="#1f77b4"><title>{i * top / bins:.0f}-{(i + 1) * top / bins:.0f} s: '
                     f'{c}</title></rect>')
    return f'<svg id="jct" width="{W}" height="{H}" viewBox="0 0 {W} {H}">{"".join(parts)}</svg>'


def _job_rows(rows: list[dict], names: dict[int, str]) -> str:
    out = []
    for r in rows:
        a = r["allocation"] or {}
        gpus = f'{a.get("gpus")} x {escape(a.get("gpu_type", ""))}' if a else "-"
        pct = 100.0 * float(r["progress"])
        out.append(f'<tr class="job {escape(r["state"])}" id="job-{escape(r["id"])}"><td><code>{escape(r["id"][:8])}</code></td>'
                   f'<td>{escape(r["name"])}</td><td>{escape(names.get(r["user_id"], "?"))}</td>'
                   f'<td>{escape(r["state"])}</td><td>{gpus}</td>'
                   f'<td><svg width="100" height="10"><rect width="100" height="10" fill="#eee"/>'
                   f'<rect width="{pct:.0f}" height="10" fill="#2ca02c"/></svg> {pct:.0f}%</td></tr>')
    return "".join(out)


def _controller_line(snap: dict) -> str:
    """Failing scheduling rounds and the policy's solver outcomes (Sia, MILP), when there are any."""
    from gpuwise.sim.metrics import solver_line

    h, parts = snap.get("health") or {}, []
    if h.get("consecutive_failures"):
        parts.append(f'scheduling rounds failing ({h["consecutive_failures"]} in a row): {h["last_error"]}')
    line = solver_line(snap["policy"], snap.get("solver"))
    if line:
        parts.append(line)
    return "".join(f'<p class="controller">{escape(p)}</p>' for p in parts)


def render(user: str, rows: list[dict], done: list[dict], usage: list[dict], snap: dict,
           names: dict[int, str]) -> str:
    jcts = [r["finished_sim"] - r["submitted_sim"] for r in done
            if r["finished_sim"] is not None and r["submitted_sim"] is not None]
    cap = {g["gpu"]: g["total"] for g in snap["gpu_types"]}
    used = ", ".join(f'{g["used"]}/{g["total"]} {escape(g["gpu"])}' for g in snap["gpu_types"])
    mean = f"{sum(jcts) / len(jcts):.0f} s mean over {len(jcts)} jobs" if jcts else "none yet"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>gpuwise dashboard</title>
<meta http-equiv="refresh" content="5">
<style>body{{font-family:sans-serif;margin:20px;background:#fff}} table{{border-collapse:collapse}}
td,th{{border-bottom:1px solid #ddd;padding:3px 8px;font-size:13px}} .charts{{display:flex;gap:20px;flex-wrap:wrap}}</style>
</head><body><h1>gpuwise</h1>
<p>user <b>{escape(user)}</b> &middot; cluster <b>{escape(snap["name"])}</b> ({escape(snap["describe"])}) &middot;
backend {escape(snap["backend"])} &middot; policy {escape(snap["policy"])} &middot; clock {snap["clock_s"]:.0f} s &middot;
GPUs in use {used}</p>{_controller_line(snap)}
<div class="charts"><div><h2>GPUs in use over time</h2>{usage_svg(usage, cap)}</div>
<div><h2>Job completion time ({mean})</h2>{jct_svg(jcts)}</div></div>
<h2>Jobs ({len(rows)})</h2><table id="jobs"><tr><th>id</th><th>name</th><th>user</th><th>state</th><th>GPUs</th>
<th>progress</th></tr>{_job_rows(rows, names)}</table></body></html>"""


