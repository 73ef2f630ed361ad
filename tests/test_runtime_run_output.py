"""`gpuwise run --json` keeps stdout for the JSON: what Ray prints meanwhile goes to stderr (issue 23)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_json_stdout_carries_the_json_alone():
    # a child process and this one write to the stdout descriptor mid-run, as Ray's log monitor does
    code = ("import os, subprocess, sys\nfrom gpuwise.cli.run import stdout_to_stderr\n"
            "from gpuwise.cli.output import emit_json\n"
            "with stdout_to_stderr(True):\n"
            "    subprocess.run([sys.executable, '-c', 'print(\"A worker died or was killed\")'])\n"
            "    os.write(1, b'raylet: worker died\\n'); print('and from Python')\n"
            "emit_json({'jobs_completed': 1})\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"jobs_completed": 1}
    assert "A worker died" in out.stderr and "raylet: worker died" in out.stderr and "and from Python" in out.stderr


def _resumed(tmp_path, flight, elapsed, points):
    """A job resumed from a real state file whose run stopped with ``flight`` = [from_step, steps, t0]."""
    from gpuwise.policies.base import JobState
    from gpuwise.runtime.actuator import JobRun, resume_run
    from gpuwise.runtime.measured import OnlineFit
    from gpuwise.runtime.store import Store
    from gpuwise.workload.traces import TraceJob

    store = Store(tmp_path / "state")
    store.record_checkpoint("j", 20, 20.0, "j-20.pt", 90.0)
    store.put("chunk_in_flight:j", flight)
    store.put("elapsed_s", elapsed)
    store.save_job("j", "running", 0.0, None, 1, 0, 0, 3, 10.0, {"points": points})
    jr = JobRun(JobState(job=TraceJob("j", 0.0, 1, "tiny-llama", 16), submitted_s=0.0, target=100.0),
                OnlineFit(ref_batch=16))
    resume_run(jr, store.jobs()["j"], store)
    again = JobRun(jr.js, OnlineFit(ref_batch=16))            # killed again before any save: no double count
    resume_run(again, store.jobs()["j"], store)
    return jr, again


def test_steps_redone_after_a_stopped_run_count_as_lost(tmp_path):
    jr, again = _resumed(tmp_path, [20, 10, 100.0], 106.5, [[1, 1, 16.0, 1.0, 0.0]])   # 6 of 10 steps at 1 s
    assert jr.step == 20 and jr.lost_steps == 3 + 6 and again.lost_steps == 9
    assert jr.events[-1]["kind"] == "fault" and jr.events[-1]["lost_steps"] == 6


def test_a_chunk_that_reached_its_checkpoint_loses_nothing(tmp_path):
    jr, _ = _resumed(tmp_path, [10, 10, 80.0], 106.5, [[1, 1, 16.0, 1.0, 0.0]])
    assert jr.lost_steps == 3


def test_each_steps_loss_is_kept_in_the_state_file_and_a_retrained_step_replaces_its_loss(tmp_path):
    """The dashboard's loss curve reads the state file: it survives a restart of whoever wrote it."""
    from gpuwise.runtime.store import Store

    store = Store(tmp_path)
    store.record_losses("a", [(0, 4.0), (1, 3.5), (2, 3.1)])
    store.record_losses("b", [(0, 9.0)])
    store.record_losses("a", [(2, 3.0), (3, 2.8)])       # step 2 trained again after a fault
    store.close()
    again = Store(tmp_path)
    assert again.losses("a") == [(0, 4.0), (1, 3.5), (2, 3.0), (3, 2.8)] and again.losses("b") == [(0, 9.0)]
    assert again.losses("nobody") == []
    again.close()


def test_a_jobs_artifacts_are_its_files_and_nothing_a_link_or_a_path_reaches_outside(tmp_path):
    from gpuwise.runtime.artifacts import artifact_file, list_artifacts, log_tails

    job = tmp_path / "jobs" / "j"
    (job / "checkpoints").mkdir(parents=True)
    (job / "logs").mkdir()
    (job / "control").mkdir()
    (job / "checkpoints" / "step-0000010.pt").write_bytes(b"x" * 100)
    (job / "logs" / "rank0.log").write_text("line\n" * 3000)
    (job / "control" / "go").write_text("go")
    secret = tmp_path / "secret.txt"
    secret.write_text("server's own file")
    (job / "logs" / "leak.log").symlink_to(secret)                # a script's link must not be followed
    (job / "checkpoints" / "dir").symlink_to(tmp_path, target_is_directory=True)
    listed = {a.path: a.bytes for a in list_artifacts(job)}
    assert listed == {"checkpoints/step-0000010.pt": 100, "logs/rank0.log": 15000}
    assert artifact_file(job, "logs/rank0.log") == job / "logs" / "rank0.log"
    for bad in ("logs/leak.log", "checkpoints/dir/secret.txt", "../secret.txt", "logs/../../secret.txt",
                "/etc/passwd", "control/go", "", "logs", "logs//rank0.log", "logs\\rank0.log"):
        assert artifact_file(job, bad) is None, bad
    tails = log_tails(job, max_bytes=100)
    assert list(tails) == ["rank0.log"] and tails["rank0.log"] == "line\n" * 20


def test_artifact_paths_a_client_makes_up_never_fail_and_a_linked_job_folder_is_refused(tmp_path):
    """A NUL, an over-long name, a job folder that is itself a link: None (the API's 404), never an
    exception (a 500); opening refuses a FIFO; a state folder named with '#' still reads."""
    from gpuwise.runtime.artifacts import artifact_file, list_artifacts, log_tails, open_artifact
    from gpuwise.runtime.store import Store

    other = tmp_path / "jobs" / "other"
    (other / "logs").mkdir(parents=True)
    (other / "logs" / "rank0.log").write_text("other's log")
    mine = tmp_path / "jobs" / "mine"
    mine.symlink_to(other, target_is_directory=True)
    assert artifact_file(mine, "logs/rank0.log") is None and list_artifacts(mine) == [] and log_tails(mine) == {}
    for bad in ("logs/rank0.log\x00", "logs/" + "a" * 300, "logs/" + "a" * 300 + "/b"):
        assert artifact_file(other, bad) is None, bad
    os.mkfifo(other / "logs" / "pipe.log")
    assert open_artifact(other, "logs/pipe.log") is None and list(log_tails(other)) == ["rank0.log"]
    with open_artifact(other, "logs/rank0.log") as f:
        assert f.read() == b"other's log"
    store = Store(tmp_path / "state#1?x%41")
    store.record_losses("j", [(0, 1.5)])
    store.put("measured:j", {"chunks": 1})
    assert store.losses("j") == [(0, 1.5)] and store.peek("measured:j") == {"chunks": 1}
    store.close()
