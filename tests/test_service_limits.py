"""The service holds up against hostile clients (issue 23, part 1), on a real server on loopback.

Alias bombs, oversized bodies, server paths as models, NaN, 1e30, booleans and deep nesting get a
small 4xx fast while /v1/health keeps answering, also under 45 concurrent plans; half-sent requests
are cut; a reused idempotency key with another body is a conflict; a revoked token stops at once;
a second server on the store and a second `gpuwise run` on a state folder refuse; cancelling
releases the allocation; the store is its owner's only; ``?token=`` pages are not cached.
"""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")

from test_service_api import SPEC, Server, wait_for  # noqa: E402 -- the same server harness

pytestmark = [pytest.mark.xdist_group("server"), pytest.mark.timeout(120), pytest.mark.slow]

READ_TIMEOUT = 1.0
# nested aliases: 9^7 copies of "x" once expanded (the 450-byte body, one level deeper)
BOMB = "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcde", "bcdef"))
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB + "model: [" + ", ".join(["*f"] * 9) + "]\n"
TINY_PLAN = {"model": "resnet18-cifar10", "training": {"samples": 1e6, "global_batch": 128},
             "constraints": {"gpus": ["T4"], "clouds": ["aws"], "max_gpus": 16}}   # ~70 ms a plan


def _job(**training) -> bytes:
    return json.dumps({"model": "resnet18-cifar10", "training": {"samples": 1e6, "global_batch": 64, **training}},
                      allow_nan=True).encode()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("limits"), "--read-timeout", str(READ_TIMEOUT))
    s.start()
    from gpuwise.jobqueue.store import Store

    store = Store(s.db)
    s.tokens = {"alice": store.create_token("alice")[1], "root": store.create_token("root", admin=True)[1]}
    store.close()
    yield s
    if s.proc.poll() is None:
        s.proc.terminate()
        s.proc.wait(timeout=10)


def _auth(s: Server, user: str = "alice") -> dict:
    return {"Authorization": f"Bearer {s.tokens[user]}"}


def _health_s(s: Server) -> float:
    t = time.perf_counter()
    assert httpx.get(s.url + "/v1/health", timeout=10).status_code == 200
    return time.perf_counter() - t


HOSTILE = {
    "alias bomb": (BOMB.encode(), "application/yaml", 422, "body"),
    "10 MB body": (b'{"name": "' + b"x" * (10 << 20) + b'"}', "application/json", 413, None),
    "server path": (b'{"model": "/etc/passwd", "training": {"samples": 1e6, "global_batch": 64}}',
                    "application/json", 422, "model"),
    "relative path": (b'{"model": "service.db", "training": {"samples": 1e6, "global_batch": 64}}',
                      "application/json", 422, "model"),
    "NaN": (_job(samples=float("nan")), "application/json", 422, "training.samples"),
    "1e30": (_job(global_batch=1e30), "application/json", 422, "training.global_batch"),
    "true as a count": (_job(global_batch=True), "application/json", 422, "training.global_batch"),
    "200k-char name": (json.dumps({"name": "x" * 200_000}).encode(), "application/json", 422, "name"),
    "deep JSON": (b"[" * 1000 + b"]" * 1000, "application/json", 422, "body"),
    "deep YAML": (b"[" * 1000 + b"]" * 1000, "application/yaml", 422, "body"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_bodies_get_a_small_4xx_fast_and_health_answers(srv, case):
    body, ctype, status, field = HOSTILE[case]
    t = time.perf_counter()
    r = httpx.post(srv.url + "/v1/jobs", content=body, timeout=30, headers={**_auth(srv), "Content-Type": ctype})
    took = time.perf_counter() - t
    assert r.status_code == status, r.text[:500]
    assert len(r.content) < 10_000 and took < 2.0
    if field:
        assert r.json()["detail"]["field"] == field
    assert _health_s(srv) < 1.0


def test_a_server_path_is_never_read(srv):
    """Whether the file exists does not show in the answer: the server never looks."""
    answers = []
    for path in ("/etc/passwd", "/no/such/file.json"):
        r = httpx.post(srv.url + "/v1/plan", json={"model": path, "training": {"samples": 1e6, "global_batch": 64}},
                       headers=_auth(srv))
        assert r.status_code == 422
        answers.append(r.json()["detail"]["fix"])
    assert answers[0] == answers[1] and "preset" in answers[0]


def test_health_answers_during_45_concurrent_plans(srv):
    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=50)) as client, ThreadPoolExecutor(46) as pool:
        plans = [pool.submit(client.post, srv.url + "/v1/plan?top=1", json=TINY_PLAN, headers=_auth(srv))
                 for _ in range(45)]
        waits = []
        while not all(p.done() for p in plans):
            waits.append(_health_s(srv))
        codes = {p.result().status_code for p in plans}
    assert codes <= {200, 503} and 200 in codes
    # health is never queued behind the plans (45 in a row take tens of seconds): typically 0.1-0.4 s;
    # the bound leaves room for a 2-core machine busy with other tests (one 1.19 s wait seen under load)
    waits.sort()
    assert waits and waits[len(waits) // 2] < 0.5 and waits[-1] < 3.0, waits


def test_half_sent_requests_are_cut(srv):
    host, port = srv.url.removeprefix("http://").split(":")
    heads = socket.create_connection((host, int(port)), timeout=10)     # headers never finished
    body = socket.create_connection((host, int(port)), timeout=10)      # body never finished
    with heads, body:
        t = time.perf_counter()
        heads.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        body.sendall(b"POST /v1/plan HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + srv.tokens["alice"].encode()
                     + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"")
        assert body.recv(200).startswith(b"HTTP/1.1 408")
        assert heads.recv(100) == b"" and time.perf_counter() - t < READ_TIMEOUT + 2


def test_idempotency_key_reused_with_another_body_is_a_conflict(srv):
    first, other = SPEC.read_text(), SPEC.read_text().replace("epochs: 60", "epochs: 61")
    heads = {**_auth(srv), "Content-Type": "application/yaml", "Idempotency-Key": "k-23"}
    a = httpx.post(srv.url + "/v1/jobs", content=first.encode(), headers=heads, timeout=60)
    again = httpx.post(srv.url + "/v1/jobs", content=first.encode(), headers=heads, timeout=60)
    b = httpx.post(srv.url + "/v1/jobs", content=other.encode(), headers=heads, timeout=60)
    assert a.status_code == 201 and again.status_code == 200 and again.json()["id"] == a.json()["id"]
    assert b.status_code == 409 and a.json()["id"] in b.json()["detail"]


def test_token_revoke_takes_effect_at_once(srv, capsys):
    from gpuwise.cli.main import main
    from gpuwise.jobqueue.store import Store

    store = Store(srv.db)
    token = store.create_token("mallory")[1]
    store.close()
    heads = {"Authorization": f"Bearer {token}"}
    assert httpx.get(srv.url + "/v1/jobs", headers=heads).status_code == 200     # seen once by the server
    assert main(["token", "revoke", "mallory", "--db", srv.db]) == 0
    assert "revoked 1 token of user mallory" in capsys.readouterr().out
    assert httpx.get(srv.url + "/v1/jobs", headers=heads).status_code == 401
    assert main(["token", "revoke", "nobody", "--db", srv.db]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuwise token: USER: 'nobody'") and len(err.splitlines()) == 1


def test_a_second_server_on_the_store_refuses(srv, capsys):
    from gpuwise.cli.main import main

    assert main(["serve", "--db", srv.db, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"another gpuwise serve (pid {srv.proc.pid})" in err and len(err.splitlines()) == 1
    assert _health_s(srv) < 1.0


def test_a_second_run_on_the_state_refuses_and_a_dead_holder_leaves_no_lock(tmp_path, capsys):
    import subprocess
    import sys

    from gpuwise.cli.main import main
    from gpuwise.runtime.lock import WriterLock

    state = tmp_path / "state"
    args = ["run", "--cluster", "examples/run/cluster.yaml", "--workload", "examples/run/workload.csv",
            "--policy", "fifo", "--state", str(state)]
    with WriterLock(state / "state.sqlite.lock", "--state", str(state), "gpuwise run"):
        assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpuwise run: --state:") and "another gpuwise run" in err and len(err.splitlines()) == 1
    # a holder killed outright: the kernel drops its flock, the next writer gets the lock
    code = ("import os, signal; from pathlib import Path; from gpuwise.runtime.lock import WriterLock; "
            f"WriterLock(Path({str(state)!r}) / 'state.sqlite.lock', 's', 's', 'w'); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1], timeout=60)
    WriterLock(state / "state.sqlite.lock", "--state", str(state), "gpuwise run").release()


def test_cancel_releases_the_allocation_with_an_event(srv):
    long = SPEC.read_text().replace("epochs: 60", "epochs: 6000")
    jid = httpx.post(srv.url + "/v1/jobs", content=long.encode(), timeout=60,
                     headers={**_auth(srv), "Content-Type": "application/yaml"}).json()["id"]
    running = wait_for(srv, "alice", jid, ("running",))
    assert running["gpus"] >= 1
    assert httpx.delete(f"{srv.url}/v1/jobs/{jid}", headers=_auth(srv)).status_code == 200
    job = httpx.get(f"{srv.url}/v1/jobs/{jid}", headers=_auth(srv)).json()
    assert job["allocation"] is None and job["gpus"] == 0
    assert [e["kind"] for e in job["allocation_history"]][-1] == "released"
    assert job["allocation_history"][-1]["detail"] == running["allocation"]


def test_store_files_are_the_owners_only(srv):
    files = [srv.tmp / n for n in ("service.db", "service.db-wal")] + list((srv.tmp / "specs").glob("*.yaml"))
    assert len(files) >= 3
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in files} == {f.name: "0o600" for f in files}


def test_token_pages_are_not_cached_and_docs_need_no_cdn(srv):
    r = httpx.get(f"{srv.url}/?token={srv.tokens['alice']}")
    assert r.status_code == 200
    assert r.headers["cache-control"] == "no-store" and r.headers["referrer-policy"] == "no-referrer"
    assert httpx.get(srv.url + "/docs").status_code == 404           # Swagger would load from a CDN
    assert httpx.get(srv.url + "/openapi.json").json()["info"]["title"] == "gpuwise"


def test_client_named_files_stay_inside_the_inputs_folder(tmp_path):
    """Issue 23 (a review found it on the Ray backend): a spec's entrypoint/data/weights/tokenizer over the
    API names a file inside `serve --inputs-dir` only; without one, no client-named file is run or read."""
    from gpuwise.errors import InputError
    from gpuwise.service.limits import check_user_paths
    from gpuwise.workload.jobspec import parse_job

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.txt").write_text("x")
    (tmp_path / "train.py").write_text("print(1)")
    base = {"name": "j", "model": "tiny-llama", "training": {"steps": 10, "reference_batch": 8, "global_batch": 8}}
    ok = check_user_paths(parse_job({**base, "data": "data/t.txt"}), str(tmp_path))
    assert ok.data == str((tmp_path / "data" / "t.txt").resolve())
    run = check_user_paths(parse_job({**base, "entrypoint": "train.py --steps 3"}), str(tmp_path))
    assert run.entrypoint.endswith("train.py --steps 3") and run.entrypoint.startswith(str(tmp_path.resolve()))
    (tmp_path / "out").symlink_to("/etc")
    for field, value, inputs in [("data", "data/t.txt", None), ("data", "/etc/shadow", str(tmp_path)),
                                 ("data", "../x", str(tmp_path)), ("tokenizer", "out/passwd", str(tmp_path)),
                                 ("entrypoint", "/usr/lib/python3/http/server.py 8000", str(tmp_path))]:
        try:
            check_user_paths(parse_job({**base, field: value}), inputs)
        except InputError as e:
            assert e.field == field and "\n" not in str(e)
        else:
            raise AssertionError(f"{field}={value} accepted with inputs {inputs}")
