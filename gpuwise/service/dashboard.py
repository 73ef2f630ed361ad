"""The dashboard's main page and the HTML shell its pages share (server-rendered, no JavaScript).

Jobs with state, GPUs and progress (each id links to its job page, `job_page`); GPUs in use over
time per GPU type (from the store's usage series); the distribution of finished jobs' completion
times. Charts: `gpuwise.service.charts` (matplotlib, inline SVG).
"""

from __future__ import annotations

from html import escape

from gpuwise.service.charts import jct_figure, svg, usage_figure

SHORT_ID = 8     # characters of a job id the pages show; `gpuwise jobs`/`cancel` accept such a prefix

STYLE = """body{font-family:sans-serif;margin:20px;background:#fff;color:#222}
table{border-collapse:collapse} td,th{border-bottom:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}
.charts{display:flex;gap:16px;flex-wrap:wrap} .chart svg{display:block;height:auto;max-width:100%}
h2{font-size:17px;margin:14px 0 6px} .muted{color:#666} .err{color:#b00020}
pre.log{max-height:22em;overflow:auto;background:#f6f6f6;padding:6px;font-size:12px;white-space:pre-wrap}
form.inline{display:inline} button{font-size:13px;padding:3px 10px}
nav{float:right;font-size:13px}"""


def page(title: str, body: str, refresh_s: int | None = None, signed_in: str | None = None,
         csrf: str | None = None) -> str:
    """A whole HTML page; ``signed_in`` (the user, when the cookie signed them in) adds a sign-out button."""
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    nav = ""
    if signed_in and csrf:
        nav = (f'<nav>signed in as <b>{escape(signed_in)}</b> <form class="inline" method="post" '
               f'action="/logout"><input type="hidden" name="csrf" value="{csrf}">'
               f'<button type="submit">sign out</button></form></nav>')
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{escape(title)}</title>{meta}'
            f'<style>{STYLE}</style></head><body>{nav}{body}</body></html>')


def progress_bar(progress: float) -> str:
    pct = 100.0 * float(progress)
    return (f'<svg width="100" height="10" role="img" aria-label="{pct:.0f}%"><rect width="100" height="10" '
            f'fill="#eee"/><rect width="{pct:.0f}" height="10" fill="#2ca02c"/></svg> {pct:.0f}%')


def gpus_text(alloc: dict | None) -> str:
    return f'{alloc.get("gpus")} x {escape(str(alloc.get("gpu_type", "")))}' if alloc else "-"


def _job_rows(rows: list[dict], names: dict[int, str]) -> str:
    out = []
    for r in rows:
        jid = escape(r["id"])
        out.append(f'<tr class="job {escape(r["state"])}" id="job-{jid}">'
                   f'<td><a href="/jobs/{jid}"><code>{jid[:SHORT_ID]}</code></a></td>'
                   f'<td>{escape(r["name"])}</td><td>{escape(names.get(r["user_id"], "?"))}</td>'
                   f'<td>{escape(r["state"])}</td><td>{gpus_text(r["allocation"])}</td>'
                   f'<td>{progress_bar(r["progress"])}</td></tr>')
    return "".join(out)


def _controller_line(snap: dict) -> str:
    """Failing scheduling rounds, lost nodes and the policy's solver outcomes (Sia, MILP), when there are any."""
    from gpuwise.sim.metrics import solver_line

    h, parts = snap.get("health") or {}, []
    if h.get("consecutive_failures"):
        parts.append(f'scheduling rounds failing ({h["consecutive_failures"]} in a row): {h["last_error"]}')
    cap = snap.get("capacity") or {}
    if cap.get("lost_nodes"):
        names = ", ".join(f'{d["name"]} ({d["gpus"]} {d["gpu_type"]}, at {d["t"]:.0f} s)' for d in cap["lost_nodes"])
        parts.append(f'nodes lost: {names}; {cap["gpus"]} of {cap["spec_gpus"]} GPUs remain')
    line = solver_line(snap["policy"], snap.get("solver"))
    if line:
        parts.append(line)
    return "".join(f'<p class="controller">{escape(p)}</p>' for p in parts)


def render(user: str, rows: list[dict], done: list[dict], usage: list[dict], snap: dict,
           names: dict[int, str], signed_in: bool = False, csrf: str | None = None) -> str:
    jcts = [r["finished_sim"] - r["submitted_sim"] for r in done
            if r["finished_sim"] is not None and r["submitted_sim"] is not None]
    cap = {g["gpu"]: g["total"] for g in snap["gpu_types"]}
    used = ", ".join(f'{g["used"]}/{g["total"]} {escape(g["gpu"])}' for g in snap["gpu_types"])
    mean = f"mean {sum(jcts) / len(jcts):.0f} s over {len(jcts)} jobs" if jcts else "none yet"
    usage_chart = svg(usage_figure(usage, cap, snap["clock_s"]), "usage")
    body = f"""<h1>gpuwise</h1>
<p>user <b>{escape(user)}</b> &middot; cluster <b>{escape(snap["name"])}</b> ({escape(snap["describe"])}) &middot;
backend {escape(snap["backend"])} &middot; policy {escape(snap["policy"])} &middot; clock {snap["clock_s"]:.0f} s &middot;
GPUs in use {used}</p>{_controller_line(snap)}
<div class="charts"><div><h2>GPUs in use over time</h2>{usage_chart}</div>
<div><h2>Job completion time ({mean})</h2>{svg(jct_figure(jcts), "jct")}</div></div>
<h2>Jobs ({len(rows)})</h2><p class="muted">click an id for the job's page: events, progress against the
prediction, loss, cost; <code>gpuwise jobs ID</code> and <code>gpuwise cancel ID</code> take the short id.</p>
<table id="jobs"><tr><th>id</th><th>name</th><th>user</th><th>state</th><th>GPUs</th>
<th>progress</th></tr>{_job_rows(rows, names)}</table>"""
    return page("gpuwise dashboard", body, refresh_s=10, signed_in=user if signed_in else None, csrf=csrf)


def sign_in_page(message: str = "") -> str:
    """The sign-in form: the token goes in a POST body, never in a URL."""
    err = f'<p class="err">{escape(message)}</p>' if message else ""
    body = f"""<h1>gpuwise</h1><h2>Sign in</h2>{err}
<form method="post" action="/login"><label>API token <input type="password" name="token" size="50"
autocomplete="current-password" required></label> <button type="submit">sign in</button></form>
<p class="muted">Create a token with <code>gpuwise token create USER</code>. It is kept in an HttpOnly,
SameSite=Strict cookie of this site.</p>"""
    return page("gpuwise: sign in", body)


def error_page(status: int, message: str, back: str = "/") -> str:
    return page(f"gpuwise: {status}", f'<h1>gpuwise</h1><p class="err">{status}: {escape(message)}</p>'
                                      f'<p><a href="{escape(back)}">back</a></p>')
