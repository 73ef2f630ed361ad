"""The job service on a real local Ray cluster (issue 15, `gpuwise serve --backend ray`).

One server (real uvicorn on loopback, a private Ray head with 2 CPU slot workers) serves the slow
test: a tiny-llama job goes submitted -> scheduled -> running -> done, training for real (its
checkpoints and losses are in the runtime's state file), and llama-3.1-8b is refused at submission.
The fast tests check what a submitted spec becomes on the runtime, without Ray.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chromium_shot import chromium, png_pixels, shoot

from gpuwise.data import data_path
from gpuwise.errors import Infeasible, InputError
from gpuwise.hardware.cluster import load_cluster
from gpuwise.runtime.jobspecs import run_job, runnable_spec
from gpuwise.workload.jobspec import parse_job

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = load_cluster(data_path("clusters", "ray-local.yaml"))
TINY = {"name": "tiny", "model": "tiny-llama", "training": {"samples": 480, "global_batch": 16}}


def test_a_runtime_model_is_trained_as_itself_and_others_are_refused():
    spec = runnable_spec(parse_job(TINY), CLUSTER)
    assert spec.model_spec().name == "tiny-llama" and spec.training.seq_len == 32
    job = run_job(parse_job(spec.model_dump(mode="json", exclude={"source_path"})), "j", 0.0, 2, None, 1)
    assert (job.application, job.batch_size, job.steps) == ("tiny-llama", 16, 30)   # 480 samples / 16
    cnn = runnable_spec(parse_job({**TINY, "model": "tiny-resnet", "training": {"samples": 64,
                                                                                  "global_batch": [8, 32]}}), CLUSTER)
    job = run_job(parse_job(cnn.model_dump(mode="json", exclude={"source_path"})), "c", 0.0, 1, None, 1)
    assert (job.application, job.min_batch, job.max_batch, job.steps) == ("tiny-resnet", 8, 32, 8)
    with pytest.raises(Infeasible) as big:
        runnable_spec(parse_job({**TINY, "model": "llama-3.1-8b"}), CLUSTER)
    assert big.value.field == "model" and "tiny-llama" in big.value.fix and "--backend sim" in big.value.fix
    with pytest.raises(InputError) as seq:
        runnable_spec(parse_job({**TINY, "training": {**TINY["training"], "seq_len": 2048}}), CLUSTER)
    assert seq.value.field == "training.seq_len" and "seq_len: 32" in seq.value.fix
    with pytest.raises(Infeasible) as wide:
        runnable_spec(parse_job({**TINY, "training": {"samples": 480, "global_batch": 4096}}), CLUSTER)
    assert wide.value.field == "training.global_batch" and "at most 128" in wide.value.fix


@pytest.mark.slow   # torch's import and flop counter: 2-12 s here, by load
def test_the_counted_numbers_of_tiny_resnet_match_the_built_model():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from gpuwise.runtime.small_models import small_model
    from gpuwise.runtime.training import Data, build

    m = small_model("tiny-resnet")
    meta, net = m.config["gpuwise"], build(m, 0)
    x, y = Data(m, 0).local_batch(0, 8, 0, 1)
    assert sum(p.numel() for p in net.parameters()) == meta["params"]
    with FlopCounterMode(display=False) as fc:
        net(x[:1], y[:1])
    assert fc.get_total_flops() == meta["flops_per_sample"]
    params, saved = {p.data_ptr() for p in net.parameters()}, {}

    def pack(t):
        if t.data_ptr() not in params:
            saved[t.data_ptr()] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        net(x, y)
    assert sum(saved.values()) / len(x) == pytest.approx(meta["activation_bytes_per_sample"], rel=0.01)


@pytest.fixture(scope="module")
def ray_server(tmp_path_factory):
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    httpx = pytest.importorskip("httpx")
    from gpuwise.jobqueue.store import Store

    tmp = tmp_path_factory.mktemp("ray-service")
    db = f"sqlite:///{tmp / 'service.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUWISE_HOME": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "gpuwise", "serve", "--backend", "ray", "--db", db, "--port", "0",
                             "--round-s", "0.2", "--inputs-dir", str(ROOT / "examples" / "byo")], cwd=tmp, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url, lines, t0 = "", [], time.monotonic()
    for line in proc.stdout:        # ends when the server exits; the test's timeout bounds the wait
        lines.append(line)
        if "listening on" in line:
            url = line.split("listening on ")[1].split()[0]
            break
    assert url, f"server exited: rc={proc.wait()}\n{''.join(lines)}"
    for _ in range(300):            # the port is bound before uvicorn listens: bounded, at most ~30 s
        try:
            if httpx.get(url + "/v1/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    print(f"\nserver with 2 Ray slot workers up in {time.monotonic() - t0:.1f} s")
    store = Store(db)
    token = store.create_token("alice")[1]
    store.close()
    yield url, {"Authorization": f"Bearer {token}"}, tmp, proc, httpx
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
@pytest.mark.timeout(240)
def test_ray_backend_trains_a_model_on_the_users_text(ray_server, monkeypatch, capsys):
    # issue 22: model + data -- tiny-llama's config, random weights, the bundled text, byte tokens
    pytest.importorskip("transformers")
    url, auth, tmp, proc, httpx = ray_server
    # files are named inside the server's --inputs-dir (examples/byo), never by a server path
    missing = httpx.post(url + "/v1/jobs", json={**TINY, "data": "data/nope.txt"}, headers=auth, timeout=60)
    assert missing.status_code == 422 and "data" in missing.text, missing.text
    for bad in ("/etc/shadow", "../../README.md", str(ROOT / "examples" / "byo" / "data" / "shakespeare.txt")):
        r = httpx.post(url + "/v1/jobs", json={**TINY, "data": bad}, headers=auth, timeout=60)
        assert r.status_code == 422 and "inputs folder" in r.text, (bad, r.text)
    r = httpx.post(url + "/v1/jobs", json={**TINY, "entrypoint": "/usr/lib/python3/http/server.py 8000"},
                   headers=auth, timeout=60)
    assert r.status_code == 422 and "inputs folder" in r.text, r.text
    r = httpx.post(url + "/v1/jobs", json={**TINY, "name": "byo", "data": "data/shakespeare.txt"}, headers=auth,
                   timeout=60)
    assert r.status_code == 201, r.text
    jid, job = r.json()["id"], {}
    for _ in range(1200):            # bounded: 120 s of polls
        job = httpx.get(f"{url}/v1/jobs/{jid}", headers=auth, timeout=10).json()
        if job["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert job["state"] == "done", job
    folder = tmp / "ray-state" / "jobs" / jid          # the job's artifacts: checkpoints and logs
    assert (folder / "checkpoints" / "step-0000030.pt").exists()
    for _ in range(300):     # "done" comes at the last boundary; the script's exit line just after (<= 30 s)
        log = (folder / "logs" / "rank0.log").read_text()
        if "--- exit" in log:
            break
        time.sleep(0.1)
    assert "tokenizer bytes" in log and "--- exit 0" in log, log[-2000:]
    with sqlite3.connect(tmp / "ray-state" / "state.sqlite") as db:
        done = dict(db.execute("SELECT kind, detail FROM events WHERE job=?", (jid,)).fetchall())["done"]
    assert json.loads(done)["loss"] < math.log(256) - 1.0   # below the uniform guess over 256 byte tokens
    # its artifacts over the API: listed, one downloadable; nothing outside the job's folder
    listed = httpx.get(f"{url}/v1/jobs/{jid}/artifacts", headers=auth, timeout=30).json()["artifacts"]
    paths = {a["path"] for a in listed}
    assert {"checkpoints/step-0000030.pt", "logs/rank0.log"} <= paths and all(a["bytes"] > 0 for a in listed), paths
    got = httpx.get(f"{url}/v1/jobs/{jid}/artifacts/logs/rank0.log", headers=auth, timeout=30)
    assert got.status_code == 200 and "--- exit 0" in got.text
    for bad in ("../../state.sqlite", "control", "logs/../../../state.sqlite", "/etc/passwd"):
        assert httpx.get(f"{url}/v1/jobs/{jid}/artifacts/{bad}", headers=auth, timeout=30).status_code == 404, bad
    # gpuwise jobs ID --logs: the run against its prediction, its events, files and log (in-process CLI)
    from gpuwise.cli.main import main

    monkeypatch.setenv("GPUWISE_TOKEN", auth["Authorization"].split()[1])
    monkeypatch.setenv("GPUWISE_SERVER", url)
    capsys.readouterr()
    assert main(["jobs", jid[:8], "--logs"]) == 0
    out = capsys.readouterr().out
    for part in ("predicted vs actual", "run time (s)", "measured vs predicted per step", "step time (s)",
                 "CPU slot workers", "events (the last", "done", "checkpoints/step-0000030.pt",
                 "--- rank0.log (tail) ---", "--- exit 0"):
        assert part in out, (part, out[-3000:])
    assert main(["jobs", jid, "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["compare"]["run_act"] > 0 and one["events"][-1]["kind"] == "done" and len(one["artifacts"]) >= 2
    m = one["measured"]                     # 30 steps in chunks of 10, each measured against the goodput object
    assert m["chunks"] >= 3 and m["steps"] >= 30 and m["last"]["device"] == "cpu", m
    assert m["last"]["predicted_step_s"] > 0 and m["last"]["measured_step_s"] > 0 and m["last"]["measured_peak_gib"] is None
    # its loss curve on the dashboard, rendered by a real browser: one point per reported step, drawn
    chromium()
    shot = tmp / "byo-job.png"
    dom = shoot(f"{url}/jobs/{jid}?token={auth['Authorization'].split()[1]}", shot, "1200,1100", tmp / "chrome")
    assert '<g id="loss-curve"' in dom and "30 steps reported by the backend" in dom, dom[-2000:]
    assert "tokenizer bytes" in dom and f'href="/jobs/{jid}/files/logs/rank0.log"' in dom     # its log and files
    curve = dom[dom.index('<g id="loss-curve"'):]
    path = curve[curve.index(' d="') + 4:]
    assert path[:path.index('"')].count("L") == 29                 # 30 losses: a move and 29 line segments
    w, h, pixels = png_pixels(shot, every=1)
    assert (w, h) == (1200, 1100) and bytes.fromhex("2ca02c") in pixels   # the curve's colour (C2) is on screen


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
@pytest.mark.timeout(240)
def test_ray_backend_trains_a_submitted_job_to_done_and_refuses_one_too_big(ray_server):
    url, auth, tmp, proc, httpx = ray_server
    big = httpx.post(url + "/v1/jobs", json={**TINY, "model": "llama-3.1-8b"}, headers=auth, timeout=60)
    assert big.status_code == 422, big.text
    detail = big.json()["detail"]
    assert detail["field"] == "model" and "tiny-llama" in detail["fix"] and "CPU slot workers" in detail["fix"]

    r = httpx.post(url + "/v1/jobs", json=TINY, headers=auth, timeout=60)
    assert r.status_code == 201, r.text
    jid, chosen = r.json()["id"], r.json()["prediction"]["chosen"]
    assert chosen["gpu"] == "T4" and chosen["gpus"] >= 1
    first, job, t0 = {}, {}, time.monotonic()
    for _ in range(900):            # bounded: 90 s of polls
        job = httpx.get(f"{url}/v1/jobs/{jid}", headers=auth, timeout=10).json()
        first.setdefault(job["state"], time.monotonic() - t0)
        if job["state"] == "running":
            assert job["gpus"] >= 1
        if job["state"] in ("done", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert job["state"] == "done", job
    (alloc,) = job["allocation_history"]
    print(f"tiny-llama, 480 samples at batch 16: submit -> running {first.get('running', 0):.1f} s, -> done "
          f"{first['done']:.1f} s; measured {job['measured_speed_per_s'] * 480:.0f} samples/s on "
          f"{alloc['detail']['gpus']} slots; CPU of the server and its Ray processes so far {_cpu_s(proc.pid):.1f} s")
    assert job["progress"] == 1.0 and job["measured_speed_per_s"] > 0 and job["attained_gpu_s"] > 0
    kinds = [e["kind"] for e in httpx.get(f"{url}/v1/jobs/{jid}/events", headers=auth).json()["events"]]
    assert kinds[:3] == ["submitted", "allocated", "running"] and kinds[-1] == "done", kinds
    # it really trained: the runtime recorded a checkpoint every 10 steps up to 30, and the loss fell
    # from ln(64) (the uniform guess over tiny-llama's 64 tokens)
    with sqlite3.connect(tmp / "ray-state" / "state.sqlite") as db:
        steps = [s for (s,) in db.execute("SELECT step FROM checkpoints WHERE job=? ORDER BY step", (jid,))]
        events = dict(db.execute("SELECT kind, detail FROM events WHERE job=?", (jid,)).fetchall())
    assert steps[-1] == 30 and all(s % 10 == 0 for s in steps), steps
    assert json.loads(events["done"])["loss"] < math.log(64) - 0.3, events
    assert (tmp / "ray-state" / "jobs" / jid / "checkpoints" / "step-0000030.pt").exists()   # the last one kept
    page = httpx.get(f"{url}/jobs/{jid}", headers=auth, timeout=30).text     # the dashboard's loss curve
    assert '<g id="loss-curve"' in page and "30 steps reported by the backend" in page, page[-2000:]
    assert 'id="measured"' in page and "steps measured on cpu" in page, page[-3000:]
    # SIGTERM: a graceful exit that ends the workers and the private Ray head (its watcher process
    # names the server's pid; it ends the head's process group and then itself)
    assert _head(proc.pid) is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    for _ in range(100):    # bounded: 10 s
        if _head(proc.pid) is None:
            break
        time.sleep(0.1)
    assert _head(proc.pid) is None


def _cpu_s(server: int) -> float:
    """CPU seconds (user + system) of the server, its children and its Ray head's process group."""
    head, total = _head(server), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            f = stat.read_text().rsplit(")", 1)[1].split()    # f[1] parent, f[2] process group
        except OSError:
            continue
        if server in (int(stat.parent.name), int(f[1])) or int(f[2]) == head:
            total += int(f[11]) + int(f[12])                  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _head(server: int) -> int | None:
    """Pid of the watcher that leads the server's private Ray head's process group (None: gone)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return next((int(ln.split()[0]) for ln in out.splitlines() if f"gpuwise.runtime.local_ray {server} " in ln), None)


def test_a_job_its_backend_fails_is_recorded_failed_and_its_gpus_released(tmp_path):
    """The Ray backend fails a job whose workers fault more than MAX_FAULTS times; the scheduler
    records it (state failed, a `failed` event) before it frees the GPUs. Here a sim backend fails
    the job on its first poll."""
    pytest.importorskip("sqlalchemy")
    from gpuwise.hardware.cluster import make_cluster
    from gpuwise.jobqueue.admission import admit
    from gpuwise.jobqueue.backend import SimBackend
    from gpuwise.jobqueue.scheduler import Scheduler
    from gpuwise.jobqueue.store import Store
    from gpuwise.plan.submit import spec_from_preset
    from gpuwise.policies.registry import make_policy

    class Failing(SimBackend):
        def poll(self, js, now):
            super().poll(js, now)
            js.status = "failed"

    cluster = make_cluster([("T4", 1, 4)])
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    user, _ = store.create_token("ann")
    backend = Failing(cluster, time_scale=1.0)
    job = admit(store, cluster, user, spec_from_preset("resnet18-cifar10", {"samples": 1e7}, 128),
                clock=backend.now).job
    sch = Scheduler(store, backend, make_policy("frenzy"), tmp_path / "specs", period_s=0.05)
    sch.restore()
    sch.round()                      # allocated
    assert store.job(job["id"])["state"] == "scheduled"
    sch.round()                      # polled: failed
    row = store.job(job["id"])
    assert row["state"] == "failed" and row["allocation"] is None and "backend" in row["message"]
    assert [e["kind"] for e in store.events(job["id"])][-1] == "failed"
    assert job["id"] not in sch.jobs and sum(g["used"] for g in sch.snapshot()["gpu_types"]) == 0
    store.close()


def test_a_ray_address_nobody_answers_is_bad_input_at_once(tmp_path):
    import socket

    from gpuwise.jobqueue.backend import make_backend

    with socket.socket() as s:      # a port free now: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(InputError) as exc:
        make_backend("ray", CLUSTER, state_dir=tmp_path, address=f"127.0.0.1:{port}")
    assert exc.value.field == "--ray-address" and "ray start --head" in exc.value.fix


@pytest.mark.parametrize("address", ["garbage", ":", "127.0.0.1:", "127.0.0.1:99999", "http://x/y:1", " :1"])
def test_a_malformed_ray_address_is_one_line_bad_input(tmp_path, address):
    """Ray's own parser raised a bare ValueError (a traceback) for these."""
    from gpuwise.jobqueue.backend import make_backend

    with pytest.raises(InputError) as exc:
        make_backend("ray", CLUSTER, state_dir=tmp_path, address=address)
    assert exc.value.field == "--ray-address" and "HOST:PORT" in exc.value.fix
