"""The dispatcher: unknown commands and bad flags exit 2 with one line, help exits 0."""

import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "gpuwise", *args], capture_output=True, text=True)


def test_help_lists_commands():
    r = run("--help")
    assert r.returncode == 0
    assert "memory" in r.stdout and "plan" in r.stdout


def test_unknown_command_suggests():
    r = run("memroy")
    assert r.returncode == 2
    assert "memory" in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
