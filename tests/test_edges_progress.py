"""Progress on long work (issue 14): a Rich bar on a terminal, nothing under --json or in a pipe.

The terminal case runs the real command with stderr on a pseudo-terminal (what a user's shell gives).
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import argparse
from pathlib import Path

from gpuwise.cli.progress import Progress, progress, wanted

ROOT = Path(__file__).resolve().parent.parent


def _on_a_terminal(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, what the terminal got on stderr) of `python -m gpuwise ARGS`."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "gpuwise", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:   # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out = proc.stdout.read().decode()
    proc.wait(timeout=120)
    os.close(master)
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


def test_fit_gpus_shows_a_bar_on_a_terminal_only_without_json():
    code, out, tty = _on_a_terminal("fit-gpus", "llama-3.1-8b")
    assert code == 0 and "Fewest GPUs per type" in out
    assert "fewest GPUs per type" in tty            # the bar's description, drawn on the terminal
    code, out, tty = _on_a_terminal("fit-gpus", "llama-3.1-8b", "--json")
    assert code == 0 and out.lstrip().startswith("{")
    assert "fewest GPUs per type" not in tty and tty.strip() == ""


def test_silent_in_a_pipe():
    r = subprocess.run([sys.executable, "-m", "gpuwise", "fit-gpus", "llama-3.1-8b"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == ""


def test_wanted_and_the_no_op_handle(monkeypatch):
    assert wanted(argparse.Namespace(json=True)) is False
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert wanted(argparse.Namespace(json=False)) is False
    seen = []
    with progress("x", 3, enabled=False) as bar:
        assert isinstance(bar, Progress)
        bar.advance()
        bar.callback(2, 3)       # accepted and ignored
        seen.append(True)
    assert seen == [True]


def test_lower_layer_reports_through_the_callback():
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.plan.fit_gpus import fit_gpus
    from gpuwise.workload.training import TrainingConfig

    calls = []
    gpus = [get_gpu("H100"), get_gpu("A100-40GB"), get_gpu("L4")]
    fit_gpus("llama-3.1-8b", TrainingConfig(seq_len=2048), gpus, on_progress=lambda d, t: calls.append((d, t)))
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
