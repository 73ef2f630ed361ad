"""The job service against a real uvicorn on loopback (sim backend), started once per session.

Covers: submit -> scheduled -> running -> done; 401/404 isolation between two users; 422 in the
CLI's words; quotas; 200 concurrent submissions recorded once; the dashboard in headless Chromium;
SIGKILL mid-run and restart with no job lost and the running ones resumed (last: it restarts the
server).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from chromium_shot import chromium, png_pixels
from chromium_shot import shoot as shoot_page

httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "workloads" / "specs" / "resnet18-cifar10.yaml"
TIME_SCALE = 400     # simulated seconds per wall second: a small job finishes in about a second

pytestmark = [pytest.mark.xdist_group("server"), pytest.mark.timeout(180), pytest.mark.slow]


class Server:
    """`gpuwise serve` in a subprocess on 127.0.0.1 (a free port); restartable on the same store."""

    def __init__(self, tmp: Path, *extra: str):
        self.tmp, self.db, self.extra = tmp, f"sqlite:///{tmp / 'service.db'}", extra
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUWISE_HOME": str(tmp)}
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuwise", "serve", "--db", self.db, "--port", "0",
             "--time-scale", str(TIME_SCALE), "--round-s", "0.1", *self.extra],
            cwd=self.tmp, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 90
        for line in self.proc.stdout:
            if "listening on" in line:
                self.url = line.split("listening on ")[1].split()[0]
                break
            assert time.monotonic() < deadline, "server did not start"
        assert self.url, f"server exited: rc={self.proc.wait()}"
        for _ in range(100):   # bounded: at most ~10 s
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError("server never answered /v1/health")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def token(self, user: str, *extra: str) -> str:
        out = subprocess.run([sys.executable, "-m", "gpuwise", "token", "create", user, "--db", self.db, *extra],
                             env=self.env, capture_output=True, text=True, timeout=60, check=True)
        last = out.stdout.strip().splitlines()[-1]
        assert last.startswith("export GPUWISE_TOKEN=")   # pasteable into a shell
        return last.split("=", 1)[1]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("service"))
    srv.start()
    from gpuwise.jobqueue.store import Store

    store = Store(srv.db)           # the library call behind `gpuwise token create` (one CLI run is enough)
    srv.tokens = {"alice": srv.token("alice"), "bob": store.create_token("bob")[1],
                  "root": store.create_token("root", admin=True)[1],
                  "carol": store.create_token("carol", quota_gpus=2)[1],
                  "dave": store.create_token("dave", quota_gpus=1)[1]}   # the burst: one GPU at a time
    store.close()
    yield srv
    if srv.proc.poll() is None:
        srv.proc.terminate()
        srv.proc.wait(timeout=10)


def auth(srv: Server, user: str) -> dict:
    return {"Authorization": f"Bearer {srv.tokens[user]}"}


def submit_yaml(srv: Server, user: str, text: str | None = None) -> httpx.Response:
    return httpx.post(srv.url + "/v1/jobs", content=(text or SPEC.read_text()).encode(), timeout=60,
                      headers={**auth(srv, user), "Content-Type": "application/yaml"})


def wait_for(srv: Server, user: str, job_id: str, states: tuple[str, ...], seconds: float = 60) -> dict:
    for _ in range(int(seconds / 0.1)):   # bounded poll
        job = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=auth(srv, user), timeout=10).json()
        if job["state"] in states:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {states}: {job}")


def test_submit_runs_to_done_with_prediction_and_history(server):
    r = submit_yaml(server, "alice")
    assert r.status_code == 201, r.text
    body = r.json()
    pred = body["prediction"]
    assert body["state"] == "queued" and len(body["id"]) == 32
    chosen = pred["chosen"]
    assert chosen["memory_gib_per_gpu"] < chosen["gpu_memory_gib"] and chosen["gpus"] >= 1
    assert {o["gpu"] for o in pred["feasible"]} == {"T4", "V100-16GB-SXM2", "A100-40GB-SXM"}
    assert chosen["time_hours"] > 0 and chosen["cost_usd"] > 0 and pred["assumptions"]
    job = wait_for(server, "alice", body["id"], ("done",))
    assert job["progress"] == 1.0 and job["jct_s"] > 0 and job["measured_speed_per_s"] > 0
    kinds = [e["kind"] for e in httpx.get(f"{server.url}/v1/jobs/{body['id']}/events",
                                          headers=auth(server, "alice")).json()["events"]]
    assert kinds == ["submitted", "allocated", "running", "done"]
    (alloc,) = job["allocation_history"]
    assert alloc["detail"]["gpu_type"] in {o["gpu"] for o in pred["feasible"]} and alloc["detail"]["gpus"] >= 1
    # simulated JCT = restart delay + predicted training time at the allocation the policy gave
    assert job["jct_s"] >= 30.0


def test_running_job_reports_measured_speed_and_cancel_releases(server):
    long = SPEC.read_text().replace("epochs: 60", "epochs: 60000")
    jid = submit_yaml(server, "alice", long).json()["id"]
    job = wait_for(server, "alice", jid, ("running",))
    assert job["measured_speed_per_s"] > 0 and job["gpus"] >= 1 and 0 <= job["progress"] < 1
    r = httpx.delete(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "alice"))
    assert r.status_code == 200 and r.json()["was"] == "running"
    assert httpx.delete(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "alice")).status_code == 409
    cluster = httpx.get(server.url + "/v1/cluster", headers=auth(server, "alice")).json()
    assert {g["gpu"] for g in cluster["gpu_types"]} == {"T4", "V100-16GB-SXM2", "A100-40GB-SXM"}


def test_users_are_isolated(server):
    jid = submit_yaml(server, "alice").json()["id"]
    assert httpx.get(server.url + "/v1/jobs").status_code == 401
    assert httpx.get(server.url + "/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert submit_yaml(server, "alice").status_code == 201
    assert httpx.post(server.url + "/v1/jobs", content=SPEC.read_bytes(),
                      headers={"Content-Type": "application/yaml"}).status_code == 401
    for path in (f"/v1/jobs/{jid}", f"/v1/jobs/{jid}/events", f"/v1/jobs/{jid}/artifacts"):
        assert httpx.get(server.url + path, headers=auth(server, "bob")).status_code == 404
        assert httpx.get(server.url + path, headers=auth(server, "root")).status_code == 200
    files = httpx.get(f"{server.url}/v1/jobs/{jid}/artifacts", headers=auth(server, "alice")).json()
    assert files["artifacts"] == [] and "keeps no artifacts" in files["note"]      # the sim backend trains nothing
    assert httpx.get(f"{server.url}/v1/jobs/{jid}/artifacts/logs/rank0.log",
                     headers=auth(server, "alice")).status_code == 404
    assert httpx.delete(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "bob")).status_code == 404
    bob = httpx.get(server.url + "/v1/jobs", headers=auth(server, "bob")).json()["jobs"]
    assert all(j["user"] == "bob" for j in bob)
    everyone = httpx.get(server.url + "/v1/jobs", headers=auth(server, "root")).json()["jobs"]
    assert jid in {j["id"] for j in everyone}


@pytest.mark.parametrize("body,ctype,field", [
    (b'{"model": "resnet18-cifar10", "training": {"samples": -5, "global_batch": 128}}', "application/json",
     "training.samples"),
    (b'{"model": "resnet18-cifar10", "training": {"samples": 5, "global_batch": 128}, "colour": 1}',
     "application/json", "colour"),
    (b'{"model": "resnet18-cifar10", "training": {"samples": 5}}', "application/json", "training.global_batch"),
    (b"name: x\nmodel: [unclosed\n", "application/yaml", "body"),
    (b'{"model": ', "application/json", "body"),
    (b'{"preset": "resnet18-cifar10", "amount": {"samples": 1e6, "epochs": 2}, "global_batch": 64}',
     "application/json", "amount"),
    (b"model=x", "text/plain", "Content-Type"),
])
def test_malformed_payloads_get_422_in_the_cli_words(server, body, ctype, field):
    r = httpx.post(server.url + "/v1/jobs", content=body, headers={**auth(server, "bob"), "Content-Type": ctype})
    assert r.status_code == 422, r.text
    d = r.json()["detail"]
    assert d["field"] == field and d["fix"] and d["message"] == f"{field}: {d['value']!r} is invalid; {d['fix']}"
    if ctype == "application/json" and field.startswith("training"):
        from gpuwise.errors import InputError
        from gpuwise.workload.jobspec import parse_job

        with pytest.raises(InputError) as cli:
            parse_job(json.loads(body))
        assert str(cli.value) == d["message"]          # the very words `gpuwise plan` prints


def test_quota_admission(server):
    big = SPEC.read_text().replace("epochs: 60", "epochs: 600")
    ids = [submit_yaml(server, "carol", big).json()["id"] for _ in range(3)]
    seen_max = 0
    for _ in range(60):   # bounded: 6 s of rounds
        jobs = httpx.get(server.url + "/v1/jobs", headers=auth(server, "carol")).json()["jobs"]
        seen_max = max(seen_max, sum(j["gpus"] for j in jobs))
        if any(j["state"] == "running" for j in jobs):
            break
        time.sleep(0.1)
    assert 1 <= seen_max <= 2
    for jid in ids:
        httpx.delete(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "carol"))
    # 70B with AdamW (~850 GB of states) fits no GPU type of the service cluster with any layout;
    # 8B is no longer refused: it fits A100-40GB with ZeRO-3 (issue 20)
    llama = {"name": "too-big", "model": "llama-3.1-70b", "training": {"tokens": 1e9, "seq_len": 8192,
             "global_batch": 64}}
    r = httpx.post(server.url + "/v1/jobs", json=llama, headers=auth(server, "carol"))
    assert r.status_code == 409 and "fits on no GPU type" in r.json()["detail"]


def test_client_commands_submit_list_cancel(server, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(f"server: {server.url}\ntoken: {server.tokens['bob']}\n")
    env = {**server.env, "GPUWISE_HOME": str(home)}            # token and server from the config file
    env.pop("GPUWISE_TOKEN", None)
    long = tmp_path / "long.yaml"
    long.write_text(SPEC.read_text().replace("epochs: 60", "epochs: 60000"))

    def gw(*args, **kw):
        return subprocess.run([sys.executable, "-m", "gpuwise", *args], env=kw.get("env", env), capture_output=True,
                              text=True, timeout=120)

    sub = gw("submit", str(long), "--json")
    assert sub.returncode == 0, sub.stderr
    jid = json.loads(sub.stdout)["id"]
    listed = gw("jobs", "--json", env={**server.env, "GPUWISE_TOKEN": server.tokens["bob"],
                                       "GPUWISE_SERVER": server.url})   # from the environment
    assert listed.returncode == 0 and jid in {j["id"] for j in json.loads(listed.stdout)["jobs"]}
    out = gw("cancel", jid)
    assert out.returncode == 0 and f"job {jid} cancelled" in out.stdout
    assert httpx.get(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "bob")).json()["state"] == "cancelled"
    again = gw("cancel", jid)
    assert again.returncode == 1 and "HTTP 409" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    assert again.stderr.startswith("gpuwise cancel: ")


def test_client_commands_human_and_json_through_one_helper(server, tmp_path):
    """submit/jobs/cancel share cli/service_call.answer: human lines, --json verbatim, refusals exit 1."""
    env = {**server.env, "GPUWISE_TOKEN": server.tokens["bob"], "GPUWISE_SERVER": server.url}
    long = tmp_path / "long.yaml"
    long.write_text(SPEC.read_text().replace("epochs: 60", "epochs: 60000"))

    def gw(*args):
        return subprocess.run([sys.executable, "-m", "gpuwise", *args], env=env, capture_output=True,
                              text=True, timeout=120)

    sub = gw("submit", str(long))
    assert sub.returncode == 0, sub.stderr
    assert sub.stdout.startswith("job ") and "predicted" in sub.stdout and "GiB per GPU" in sub.stdout
    jid = sub.stdout.split()[1]
    missing = gw("cancel", "no-such-job")
    assert missing.returncode == 1 and missing.stderr.startswith("gpuwise cancel: HTTP 404")
    assert len(missing.stderr.strip().splitlines()) == 1
    out = gw("cancel", jid, "--json")     # --json on cancel too: the server's answer as it is
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["id"] == jid
    listed = gw("jobs", "--state", "cancelled")
    assert listed.returncode == 0 and "jobs" in listed.stdout and jid in listed.stdout, listed.stdout


def test_plan_as_a_service_matches_the_cli(server):
    spec = ROOT / "examples" / "resnet50-imagenet.yaml"
    r = httpx.post(server.url + "/v1/plan?objective=cost&top=3", content=spec.read_bytes(), timeout=120,
                   headers={**auth(server, "bob"), "Content-Type": "application/yaml"})
    assert r.status_code == 200, r.text
    cli = subprocess.run([sys.executable, "-m", "gpuwise", "plan", str(spec), "--top", "3", "--json"],
                         env=server.env, capture_output=True, text=True, timeout=120, check=True)
    assert r.json()["chosen"] == json.loads(cli.stdout)["chosen"]
    bad = httpx.post(server.url + "/v1/plan?objective=cheap", content=spec.read_bytes(),
                     headers={**auth(server, "bob"), "Content-Type": "application/yaml"})
    assert bad.status_code == 422 and bad.json()["detail"]["field"] == "objective"


def test_200_concurrent_submissions_recorded_once(server):
    client = httpx.Client(timeout=120, limits=httpx.Limits(max_connections=50))

    def one(i: int) -> tuple[int, str, int]:
        """POST with the key; a connection the server closed while idle (the keep-alive race: it
        closes after 5 s idle just as the pool reuses it) is retried, as a client with a key may."""
        body = {"preset": "resnet18-cifar10", "amount": {"samples": 20000}, "global_batch": 128,
                "name": f"burst-{i}"}
        for attempt in range(1, 4):
            try:
                r = client.post(server.url + "/v1/jobs", json=body,
                                headers={**auth(server, "dave"), "Idempotency-Key": f"burst-{i}"})
                return r.status_code, r.json()["id"], attempt
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
                if attempt == 3:
                    raise
        raise AssertionError("unreachable")

    with client, ThreadPoolExecutor(50) as pool:
        first = list(pool.map(one, range(200)))
        again = list(pool.map(one, range(0, 200, 10)))     # client retries with the same keys
    # a first try answers 201; a transport retry may find its first try recorded (200), never a new job
    assert all(s == 201 if n == 1 else s in (200, 201) for s, _, n in first)
    assert {s for s, _, _ in again} == {200}
    ids = [j for _, j, _ in first]
    assert len(set(ids)) == 200 and [j for _, j, _ in again] == ids[::10]
    jobs = httpx.get(server.url + "/v1/jobs?limit=100000", headers=auth(server, "dave")).json()["jobs"]
    names = [j["name"] for j in jobs if j["name"].startswith("burst-")]
    assert max(sum(j["gpus"] for j in jobs), 0) <= 1                      # dave's quota holds
    assert sorted(names) == sorted(f"burst-{i}" for i in range(200))


def test_sign_in_cookie_job_page_and_cancel_button(server, monkeypatch, capsys):
    """The token goes in a form body into an HttpOnly, SameSite=Strict cookie; the cancel button needs
    that cookie and the page's CSRF field; the CLI takes the short id the pages show."""
    url, tok = server.url, server.tokens["alice"]
    assert httpx.post(url + "/login", data={"token": "gw_wrong"}).status_code == 401
    r = httpx.post(url + "/login", data={"token": tok})
    assert r.status_code == 303 and r.headers["location"] == "/" and tok not in r.headers["location"]
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    jar = {"gpuwise_session": cookie.split(";")[0].split("=", 1)[1]}
    main = httpx.get(url + "/", cookies=jar)
    assert main.status_code == 200 and "sign out" in main.text
    for page in (main, httpx.get(url + "/", params={"token": tok})):     # old ?token= links still work
        assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    long = SPEC.read_text().replace("epochs: 60", "epochs: 60000")
    jid = submit_yaml(server, "alice", long).json()["id"]
    wait_for(server, "alice", jid, ("scheduled", "running"))
    page = httpx.get(f"{url}/jobs/{jid}", cookies=jar).text
    assert 'id="cancel"' in page and 'id="events"' in page and "predicted" in page
    csrf = page.split('name="csrf" value="')[1].split('"')[0]
    assert httpx.get(f"{url}/jobs/{jid}", headers=auth(server, "bob")).status_code == 404
    post = f"{url}/jobs/{jid}/cancel"
    assert httpx.post(post, data={"csrf": "forged"}, cookies=jar).status_code == 403
    assert httpx.post(post, data={"csrf": csrf}, cookies=jar,
                      headers={"Origin": "http://evil.example"}).status_code == 403
    assert httpx.post(post, data={"csrf": csrf}).status_code == 401          # no cookie: sign in first
    assert wait_for(server, "alice", jid, ("scheduled", "running"))["state"] != "cancelled"
    r = httpx.post(post, data={"csrf": csrf}, cookies=jar, headers={"Origin": url})
    assert r.status_code == 303 and r.headers["location"] == f"/jobs/{jid}"
    assert httpx.get(f"{url}/v1/jobs/{jid}", headers=auth(server, "alice")).json()["state"] == "cancelled"
    assert 'id="cancel"' not in httpx.get(f"{url}/jobs/{jid}", cookies=jar).text

    # the CLI, in-process (its output is under test, not its start-up), takes the short id
    from gpuwise.cli.main import main

    monkeypatch.setenv("GPUWISE_TOKEN", tok)
    monkeypatch.setenv("GPUWISE_SERVER", url)
    capsys.readouterr()
    assert main(["jobs", jid[:8]]) == 0                   # the 8 characters the pages show
    out = capsys.readouterr().out
    assert jid in out and "cancelled" in out
    firsts: dict[str, int] = {}
    for _ in range(17):                 # 17 ids over 16 hex digits: two of alice's share a first one
        firsts = {}
        for j in httpx.get(url + "/v1/jobs?limit=100000", headers=auth(server, "alice")).json()["jobs"]:
            firsts[j["id"][0]] = firsts.get(j["id"][0], 0) + 1
        if max(firsts.values()) > 1:
            break
        assert submit_yaml(server, "alice").status_code == 201
    assert main(["cancel", max(firsts, key=firsts.get)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuwise cancel: ID:") and "give more characters" in err


def test_dashboard_in_headless_chromium(server, tmp_path):
    """The main page and a job page, rendered and shot by headless Chromium. GPUWISE_SCREENSHOTS=DIR
    keeps the two screenshots there (docs/img holds the ones the docs show)."""
    chromium()
    jid = submit_yaml(server, "root").json()["id"]
    for _ in range(4):                  # five rows of its own, whichever tests ran before on this server
        assert submit_yaml(server, "root").status_code in (200, 201)
    wait_for(server, "root", jid, ("done",))

    def shoot(path: str, name: str, size: str) -> tuple[str, Path]:
        shot = tmp_path / name
        return shoot_page(f"{server.url}{path}?token={server.tokens['root']}", shot, size, tmp_path / "p"), shot

    dom, shot = shoot("/", "dashboard.png", "1200,900")
    assert f'id="job-{jid}"' in dom and f'href="/jobs/{jid}"' in dom and 'id="usage"' in dom
    assert 'id="jct-bars"' in dom and 'id="usage-A100-40GB-SXM"' in dom       # matplotlib's SVG, inline
    assert dom.count('<tr class="job') >= 5
    w, h, pixels = png_pixels(shot)
    assert (w, h) == (1200, 900)
    assert len(pixels) > 20                       # text, bars and lines, not a blank page
    dom, shot = shoot(f"/jobs/{jid}", "job.png", "1200,1100")
    for part in ('id="compare"', 'id="progress-actual"', 'id="progress-predicted"', 'id="events"',
                 'id="logs"', "Logs are unavailable", "this backend trains nothing"):
        assert part in dom, part
    assert dom.count('<tr class="event"') >= 4     # submitted, allocated, running, done
    assert len(png_pixels(shot)[2]) > 20
    # no token -> 401 page (the sign-in form), not the jobs
    r = httpx.get(server.url + "/")
    assert r.status_code == 401 and 'action="/login"' in r.text and "job-" not in r.text


def test_sigkill_and_restart_loses_nothing_and_resumes(server):
    long = SPEC.read_text().replace("epochs: 60", "epochs: 30000")
    jid = submit_yaml(server, "alice", long).json()["id"]
    before = wait_for(server, "alice", jid, ("running",))
    for _ in range(50):   # let some progress be recorded
        before = httpx.get(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "alice")).json()
        if before["progress"] > 0.01:
            break
        time.sleep(0.1)
    all_before = {j["id"]: j for j in httpx.get(server.url + "/v1/jobs?limit=100000",
                                                headers=auth(server, "root")).json()["jobs"]}
    server.kill()
    server.start()
    after = {j["id"]: j for j in httpx.get(server.url + "/v1/jobs?limit=100000",
                                           headers=auth(server, "root")).json()["jobs"]}
    assert set(after) == set(all_before)                                  # no job lost
    for k, j in all_before.items():                                       # nothing went backwards
        assert after[k]["progress"] >= j["progress"] - 1e-9
        if j["state"] in ("done", "cancelled"):
            assert after[k]["state"] == j["state"]
    job = after[jid]
    assert job["state"] in ("scheduled", "running") and job["progress"] >= before["progress"] > 0
    assert job["allocation"]["gpu_type"] == before["allocation"]["gpu_type"]
    kinds = [e["kind"] for e in httpx.get(f"{server.url}/v1/jobs/{jid}/events",
                                          headers=auth(server, "alice")).json()["events"]]
    assert kinds[-1] in ("resumed", "running") and "resumed" in kinds
    health = httpx.get(server.url + "/v1/health").json()
    assert health["policy"] == "frenzy"                                   # the same policy
    resumed = wait_for(server, "alice", jid, ("running",))
    for _ in range(50):
        resumed = httpx.get(f"{server.url}/v1/jobs/{jid}", headers=auth(server, "alice")).json()
        if resumed["progress"] > job["progress"]:
            break
        time.sleep(0.1)
    assert resumed["progress"] > job["progress"]                          # it keeps training
