"""gpuwise.elastic without Ray: the sample stream, standalone checkpoints and resume, and the runtime's
control protocol driven in-process (`gpuwise.runtime.script.ScriptRun`: what a slot actor runs)."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpuwise.elastic import control as ctl  # noqa: E402
from gpuwise.elastic.sampler import global_indices, local_indices  # noqa: E402
from gpuwise.errors import InputError  # noqa: E402
from gpuwise.runtime.workload import jobs_from_rows  # noqa: E402

SCRIPT = Path(__file__).parent / "data" / "elastic_linear.py"


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_any_width_trains_the_same_samples_and_batch_changes_continue_the_stream(world):
    n, seed = 50, 7
    shares = [local_indices(n, seed, 40, 12, r, world) for r in range(world)]
    assert np.concatenate(shares).tolist() == global_indices(n, seed, 40, 12).tolist()
    # 40 samples at batch 8, then batch 12 from offset 40 onwards: epoch 1 is again each sample once
    stream = np.concatenate([global_indices(n, seed, o, 8) for o in range(0, 40, 8)]
                            + [global_indices(n, seed, o, 12) for o in range(40, 100, 12)])
    assert sorted(stream[:50]) == list(range(n)) and sorted(stream[50:100]) == list(range(n))


def _run(argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    return runpy.run_path(str(SCRIPT), run_name="__main__")


def test_standalone_checkpoints_atomically_and_resumes_where_it_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("GPUWISE_")})
    first = _run([str(tmp_path), "6"], monkeypatch)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-0000003.pt", "step-0000006.pt"]          # no temporary file left behind
    again = _run([str(tmp_path), "9"], monkeypatch)
    assert [s for s, _ in first["SEEN"]] == list(range(6)) and [s for s, _ in again["SEEN"]] == [6, 7, 8]
    for step, idx in first["SEEN"] + again["SEEN"]:                   # the stream continues exactly
        assert idx == global_indices(256, 0, 8 * step, 8).tolist()
    assert again["s"].resumed.name == "step-0000006.pt"


def _launch(tmp_path, n, batch, resume=None):
    from gpuwise.runtime.script import ScriptRun

    job = {"name": "t", "argv": [str(SCRIPT)], "elastic": True, "batch": batch, "ref_batch": 8, "chunk_steps": 3,
           "resume": resume, "lr_scaling": "sqrt", "cwd": str(tmp_path), "job_dir": str(tmp_path / "job"),
           "control_dir": str(tmp_path / "job" / "control" / f"launch-{n}")}
    run = ScriptRun(job, 0, 1, "127.0.0.1", 0)
    run.start()
    return run


def test_the_runtime_stops_a_script_at_a_boundary_and_resumes_it_at_another_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if not k.startswith("GPUWISE_")})
    run = _launch(tmp_path, 1, 8)
    ready = run.wait(-1, 60)
    assert ready["kind"] == "ready" and ready["step"] == 0 and ready["checkpoint"] is None
    ctl.send_command(run.control, 0, "go")
    chunk = run.wait(0, 60)
    assert chunk["kind"] == "chunk" and chunk["end_step"] == 3 and len(chunk["loss"]) == 3 and chunk["batch"] == 8
    assert Path(chunk["checkpoint"]).exists()
    ctl.send_command(run.control, 1, "stop")                         # a rescale: stop at this boundary
    assert run.wait(1, 60) == {"kind": "exit", "exit": ctl.STOP_EXIT, "log": str(run.log)}

    run = _launch(tmp_path, 2, 16, resume=chunk["checkpoint"])        # the new allocation: batch 16
    ready = run.wait(-1, 60)
    assert ready["step"] == 3 and ready["checkpoint"] == chunk["checkpoint"]
    ctl.send_command(run.control, 0, "go")
    chunk2 = run.wait(0, 60)
    assert chunk2["end_step"] == 6 and chunk2["batch"] == 16 and chunk2["samples"] == 3 * 8 + 3 * 16
    assert chunk["lr_factor"] == 1.0 and chunk2["lr_factor"] == pytest.approx(2 ** 0.5)  # sqrt(16 / 8)
    assert chunk2["loss"][-1] < chunk["loss"][0]                      # it kept training
    ctl.send_command(run.control, 1, "done")
    assert run.wait(1, 60)["exit"] == 0
    assert "--- exit 0" in run.log.read_text()


def test_a_row_names_one_thing_to_train_and_a_script_without_the_api_is_rigid(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("# this script does not use gpuwise.elastic\nimport torch\nprint('from gpuwise import elastic')\n")
    row = {"name": "a", "time": "0", "num_gpus": "1", "steps": "10", "batch_size": "8", "min_batch": "4",
           "max_batch": "32"}
    wl = jobs_from_rows([{**row, "entrypoint": "plain.py --x 1"}], "t", tmp_path)
    job = wl.jobs[0]
    assert job.argv == (str(plain), "--x", "1") and not job.elastic and job.min_batch == job.max_batch == 8
    assert jobs_from_rows([{**row, "entrypoint": str(SCRIPT)}], "t", tmp_path).jobs[0].elastic
    with pytest.raises(InputError, match="entrypoint"):
        jobs_from_rows([{**row, "entrypoint": "missing.py"}], "t", tmp_path)
    with pytest.raises(InputError, match="exactly one"):
        jobs_from_rows([{**row, "entrypoint": "plain.py", "application": "tiny-llama"}], "t", tmp_path)
    with pytest.raises(InputError, match="needs data"):
        jobs_from_rows([{**row, "model": "tiny-llama"}], "t", tmp_path)
