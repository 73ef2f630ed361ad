"""One job's page: state, predicted vs actual run time, finish and cost, progress and loss charts,
events, and a cancel button.

Times are the backend clock in seconds (the sim backend's clock runs ``--time-scale`` times faster
than the wall). Actual cost is the job's attained GPU-seconds at the prediction's on-demand price of
the GPU type it ran on; a running job's finish and cost are projected from its measured speed.
"""

from __future__ import annotations

import json
import time
from html import escape
from urllib.parse import quote

from gpuwise.jobqueue.store import ACTIVE
from gpuwise.service.charts import loss_figure, progress_figure, svg
from gpuwise.service.dashboard import SHORT_ID, gpus_text, page, progress_bar


def _option(pred: dict, gpu: str | None) -> dict:
    return next((o for o in pred.get("options") or [] if o.get("gpu") == gpu), {})


def _ran_on(row: dict, events: list[dict]) -> dict | None:
    """The allocation the job holds, else the last one it held (from its events)."""
    if row["allocation"]:
        return row["allocation"]
    held = [e["detail"] for e in events if e["kind"] in ("allocated", "resumed") and e["detail"]]
    return held[-1] if held else None


def compare(row: dict, events: list[dict], clock_s: float) -> dict:
    """Predicted vs actual (or projected) GPUs, run time, finish and cost of one job."""
    pred = row["prediction"] or {}
    chosen = pred.get("chosen") or {}
    alloc = _ran_on(row, events)
    price = _option(pred, (alloc or {}).get("gpu_type")).get("usd_per_gpu_hour")
    pred_run = chosen["time_hours"] * 3600 if chosen.get("time_hours") else None
    start, speed = row["started_sim"], row["measured_speed"]
    out = {"gpus_pred": f'{chosen.get("gpus")} x {chosen.get("gpu")}' if chosen else "-",
           "gpus_act": gpus_text(alloc), "run_pred": pred_run, "cost_pred": chosen.get("cost_usd"),
           "finish_pred": start + pred_run if start is not None and pred_run else None,
           "finish_act": None, "run_act": None, "cost_act": None, "projected": False, "price": price,
           "eta": None}
    if row["state"] in ACTIVE and start is not None and speed and speed > 0:
        out["eta"] = clock_s + max(0.0, 1.0 - float(row["progress"])) / speed
        out["finish_act"], out["projected"] = out["eta"], True
    elif row["finished_sim"] is not None:
        out["finish_act"] = row["finished_sim"]
    if start is not None and out["finish_act"] is not None:
        out["run_act"] = out["finish_act"] - start
    if price is not None:
        cost = float(row["attained_gpu_s"]) / 3600 * price
        if out["projected"] and alloc:
            cost += (out["eta"] - clock_s) * alloc.get("gpus", 0) * price / 3600
        out["cost_act"] = cost
    return out


def _num(v: float | None, fmt: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{fmt}}{unit}"


def _compare_table(c: dict, state: str) -> str:
    act = "projected" if c["projected"] else ("actual" if state == "done" else "so far")
    rows = [("GPUs", c["gpus_pred"], c["gpus_act"]),
            ("run time (start to finish)", _num(c["run_pred"], ",.0f", " s"), _num(c["run_act"], ",.0f", " s")),
            ("finish (backend clock)", _num(c["finish_pred"], ",.0f", " s"), _num(c["finish_act"], ",.0f", " s")),
            ("cost (on-demand)", _num(c["cost_pred"], ",.2f", " USD"), _num(c["cost_act"], ",.2f", " USD"))]
    body = "".join(f"<tr><th>{a}</th><td>{b}</td><td>{d}</td></tr>" for a, b, d in rows)
    price = "no catalog price for its GPU type" if c["price"] is None else f'{c["price"]:.2f} USD per GPU-hour'
    return (f'<table id="compare"><tr><th></th><th>predicted</th><th>{act}</th></tr>{body}</table>'
            f'<p class="muted">actual cost: attained GPU-seconds at {price}; a running job is projected '
            f'from its measured speed.</p>')


def _progress_points(row: dict, clock_s: float) -> list[tuple[float, float]]:
    """Progress known at a backend time: 0 at the start, the last recorded value now, 1 at the finish.
    (A ``running`` event's progress was read later than its time, so it is not plotted.)"""
    if row["started_sim"] is None:
        return []
    pts = [(row["started_sim"], 0.0)]
    if row["state"] in ACTIVE:
        pts.append((clock_s, float(row["progress"])))
    elif row["finished_sim"] is not None:
        pts.append((row["finished_sim"], float(row["progress"])))
    return pts


def _events_table(events: list[dict]) -> str:
    rows = []
    for e in events:
        wall = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["at"]))
        detail = "" if e["detail"] is None else json.dumps(e["detail"], separators=(", ", ": "))
        rows.append(f'<tr class="event"><td>{_num(e["at_sim"], ",.1f", " s")}</td><td>{wall} UTC</td>'
                    f'<td>{escape(e["kind"])}</td><td><code>{escape(detail)}</code></td></tr>')
    return (f'<table id="events"><tr><th>backend clock</th><th>wall clock</th><th>event</th><th>detail</th></tr>'
            f'{"".join(rows)}</table>')


def _cancel_form(row: dict, csrf: str, signed_in: bool) -> str:
    if row["state"] not in ACTIVE:
        return ""
    hint = "" if signed_in else ' <span class="muted">(<a href="/login">sign in</a> to use it)</span>'
    return (f'<form class="inline" id="cancel" method="post" action="/jobs/{escape(row["id"])}/cancel">'
            f'<input type="hidden" name="csrf" value="{csrf}"><button type="submit">cancel this job</button>'
            f'</form>{hint}')


def _measured_section(m: dict | None, measures: bool) -> str:
    """Step time and peak memory as measured on the job's last chunk, against the prediction there."""
    head = "<h2>Measured vs predicted, per step</h2>"
    if not measures:
        return head + '<p id="measured" class="muted">this backend measures nothing: it trains nothing</p>'
    if m is None:
        return head + '<p id="measured" class="muted">no chunk measured yet</p>'
    last = m["last"]
    peak = _num(last["measured_peak_gib"], ".2f", " GiB") if last["measured_peak_gib"] is not None else \
        "- (not measured off CUDA)"
    rows = (f'<tr><th>step time</th><td>{_num(last["predicted_step_s"], ".3g", " s")}</td>'
            f'<td>{_num(last["measured_step_s"], ".3g", " s")}</td></tr>'
            f'<tr><th>peak memory (reserved)</th><td>{_num(last["predicted_peak_gib"], ".2f", " GiB")}</td>'
            f'<td>{peak}</td></tr>')
    shape = f'last chunk: {last["gpus"]} x {escape(str(last["gpu_type"]))}, batch {last["batch"]}'
    notes = "; ".join(escape(n) for n in m["calibration"]) or "no calibration yet"
    return (f'{head}<table id="measured"><tr><th>{shape}</th><th>predicted</th><th>measured</th></tr>{rows}</table>'
            f'<p class="muted">{m["chunks"]} chunks, {m["steps"]} steps measured on {escape(str(last["device"]))}: '
            f'{escape(m["note"])}. Predicted = the goodput object before calibration; {notes}.</p>')


def _files_section(job_id: str, files: tuple[list, dict[str, str]] | None) -> str:
    """The job's logs (each rank's tail) and its artifacts, linked for download."""
    if files is None:
        return ('<h2>Logs</h2><p id="logs" class="muted">Logs are unavailable: this backend trains nothing and '
                "keeps no worker logs. The events above are the job's record.</p>")
    artifacts, tails = files
    logs = "".join(f'<h3>{escape(name)}</h3><pre class="log">{escape(text)}</pre>' for name, text in tails.items())
    if not tails:
        logs = ('<p class="muted">No log files: the runtime\'s built-in models log no output; script and '
                "model+data jobs write logs/rank&lt;r&gt;.log.</p>")
    rows = "".join(f'<li><a href="/jobs/{quote(job_id)}/files/{quote(a.path)}">{escape(a.path)}</a> '
                   f'<span class="muted">{a.bytes / 2**20:.2f} MiB</span></li>' for a in artifacts)
    return (f'<h2>Logs</h2><div id="logs">{logs}</div>'
            f'<h2>Artifacts ({len(artifacts)})</h2><ul id="artifacts">{rows or "<li>none yet</li>"}</ul>')


def render_job(row: dict, owner: str, events: list[dict], clock_s: float, losses: list[tuple[int, float]] | None,
               csrf: str, signed_in: str | None = None, files: tuple[list, dict[str, str]] | None = None,
               measured: tuple[bool, dict | None] = (False, None)) -> str:
    """The whole page. ``losses`` None: the backend reports none (the sim backend trains nothing);
    ``files`` None: it keeps no artifacts."""
    c = compare(row, events, clock_s)
    pred = (c["finish_pred"] and (row["started_sim"], c["finish_pred"])) or None
    proj = (clock_s, float(row["progress"]), c["eta"]) if c["projected"] else None
    if losses is None:
        loss_note = "this backend trains nothing, so no losses; jobs on the ray backend report them"
    elif not losses:
        loss_note = "no losses recorded yet: the first arrive with the first checkpoint"
    else:
        loss_note = f"{len(losses)} steps reported by the backend's workers"
    msg = f'<p class="err">{escape(row["message"])}</p>' if row["message"] else ""
    held = "GPUs" if row["state"] in ACTIVE else "ran on"
    body = f"""<p><a href="/">&larr; all jobs</a></p>
<h1>{escape(row["name"])} <code class="muted">{escape(row["id"][:SHORT_ID])}</code></h1>
<p>id <code>{escape(row["id"])}</code> &middot; user <b>{escape(owner)}</b> &middot; state <b id="state">
{escape(row["state"])}</b> &middot; {held} {c["gpus_act"]} &middot; {progress_bar(row["progress"])} &middot;
restarts {row["restarts"]} {_cancel_form(row, csrf, signed_in is not None)}</p>{msg}
<h2>Predicted vs actual</h2>{_compare_table(c, row["state"])}{_measured_section(measured[1], measured[0])}
<div class="charts"><div><h2>Progress against the prediction</h2>
{svg(progress_figure(_progress_points(row, clock_s), pred, proj), "progress")}</div>
<div><h2>Training loss</h2>{svg(loss_figure(losses or []), "loss")}<p class="muted">{loss_note}</p></div></div>
<h2>Events ({len(events)})</h2>{_events_table(events)}
{_files_section(row["id"], files)}"""
    return page(f"gpuwise: {row['name']}", body, refresh_s=10 if row["state"] in ACTIVE else None,
                signed_in=signed_in, csrf=csrf)
