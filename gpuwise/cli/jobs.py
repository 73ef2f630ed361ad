"""`gpuwise jobs [ID]`: your jobs on a gpuwise server (an admin sees everyone's), or one of them by
its id or a unique start of it (the dashboard's short id): then also its predicted vs actual run,
its events and its artifacts, and with ``--logs`` the tail of each worker log."""

from __future__ import annotations

import argparse

SHOWN_EVENTS = 15      # the newest events printed for one job (--json has them all)
SHOWN_FILES = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", nargs="?", default=None,
                        help="only this job: its id or a unique start of it (the dashboard's short id)")
    parser.add_argument("--server", metavar="URL", default=None, help="server (as gpuwise submit)")
    parser.add_argument("--state", default=None, help="only jobs in this state (queued, running, done...)")
    parser.add_argument("--logs", action="store_true", help="with ID: also print the tail of each worker log")
    parser.add_argument("--json", action="store_true", help="print the server's JSON answer")


def _render(res: dict) -> None:
    from gpuwise.cli.output import print_table

    rows = [[j["id"], j["name"], j["user"], j["state"],
             f"{j['gpus']} x {j['allocation']['gpu_type']}" if j["allocation"] else "-",
             f"{100 * j['progress']:.0f}%", "" if j["jct_s"] is None else f"{j['jct_s']:.0f}"]
            for j in res["jobs"]]
    print_table(f"{len(rows)} jobs", ["id", "name", "user", "state", "GPUs", "progress", "JCT s"], rows)


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _render_one(res: dict) -> None:
    from gpuwise.cli.output import print_table

    _render({"jobs": [res]})
    c = res.get("compare") or {}
    act = "projected" if c.get("projected") else ("actual" if res["state"] == "done" else "so far")
    print_table("predicted vs " + act, ["", "predicted", act],
                [["GPUs", c.get("gpus_pred", "-"), c.get("gpus_act", "-")],
                 ["run time (s)", _num(c.get("run_pred"), ",.0f"), _num(c.get("run_act"), ",.0f")],
                 ["cost (USD)", _num(c.get("cost_pred"), ",.2f"), _num(c.get("cost_act"), ",.2f")]])
    m = res.get("measured")
    if m:
        last = m["last"]
        peak = "-" if last["measured_peak_gib"] is None else f'{last["measured_peak_gib"]:.2f}'
        print_table(f'measured vs predicted per step (last chunk: {last["gpus"]} x {last["gpu_type"]}, batch '
                    f'{last["batch"]}; {m["chunks"]} chunks on {last["device"]})', ["", "predicted", "measured"],
                    [["step time (s)", _num(last["predicted_step_s"], ".3g"), _num(last["measured_step_s"], ".3g")],
                     ["peak memory (GiB)", _num(last["predicted_peak_gib"], ".2f"), peak]])
        print(f'  {m["note"]}' + "".join(f"\n  {n}" for n in m["calibration"]))
    events = res["events"][-SHOWN_EVENTS:]
    print_table(f"events (the last {len(events)} of {len(res['events'])})", ["backend s", "event", "detail"],
                [[_num(e["at_s"], ",.1f"), e["kind"], "" if e["detail"] is None else str(e["detail"])[:100]]
                 for e in events])
    files = res["artifacts"]
    if files:
        print_table(f"artifacts ({len(files)}; download: GET /v1/jobs/{res['id']}/artifacts/PATH)",
                    ["path", "MiB"], [[a["path"], f"{a['bytes'] / 2**20:.2f}"] for a in files[:SHOWN_FILES]])
    else:
        print(f"artifacts: none ({res['artifacts_note']})")
    for name, text in (res.get("logs") or {}).items():
        print(f"--- {name} (tail) ---\n{text.rstrip()}")


def _details(args: argparse.Namespace, job: dict) -> dict:
    """The job with its events, artifacts (and, with --logs, its log tails) added."""
    from gpuwise.service.client import call

    job["events"] = call("GET", args.server, f"/v1/jobs/{job['id']}/events")["events"]
    files = _optional(args, f"/v1/jobs/{job['id']}/artifacts")
    job["artifacts"] = files["artifacts"] if files else []
    job["artifacts_note"] = files["note"] if files else "this server lists no artifacts (an older gpuwise serve)"
    if args.logs:
        logs = _optional(args, f"/v1/jobs/{job['id']}/logs")
        job["logs"] = {k: _printable(v) for k, v in logs["logs"].items()} if logs else {}
    return job


def _optional(args: argparse.Namespace, path: str) -> dict | None:
    """A route an older server may lack: its 404 is None, not an error for the whole job."""
    from gpuwise.service.client import ServiceError, call

    try:
        return call("GET", args.server, path)
    except ServiceError as exc:
        if exc.status == 404 and exc.detail == "Not Found":    # FastAPI's answer for a route it lacks
            return None
        raise


def _printable(text: str) -> str:
    """A worker log as plain text: a script's terminal escape sequences do not reach the terminal."""
    return "".join(ch if ch in "\n\t" or ch.isprintable() else "?" for ch in text)


def run(args: argparse.Namespace) -> int:
    from gpuwise.cli.service_call import answer
    from gpuwise.service.client import job_id

    if args.id is not None:
        return answer("jobs", args, "GET", lambda: f"/v1/jobs/{job_id(args.server, args.id)}", _render_one,
                      enrich=lambda job: _details(args, job))
    if args.logs:
        from gpuwise.errors import InputError

        raise InputError("--logs", True, "give a job ID: gpuwise jobs ID --logs")
    path = "/v1/jobs" + (f"?state={args.state}" if args.state else "")
    return answer("jobs", args, "GET", path, _render)
