"""`gpuwise run --json` keeps stdout for the JSON: what Ray prints meanwhile goes to stderr (issue 23)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_json_stdout_carries_the_json_alone():
    # a child process and this one write to the stdout descriptor mid-run, as Ray's log monitor does
    code = ("import os, subprocess, sys; from gpuwise.cli.run import stdout_to_stderr; from gpuwise.cli.output import emit_json\n"
            "with stdout_to_stderr(True):\n"
            "    subprocess.run([sys.executable, '-c', 'print(\"A worker died or was killed\")'])\n"
            "    os.write(1, b'raylet: worker died\\n'); print('and from Python')\n"
            "emit_json({'jobs_completed': 1})\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"jobs_completed": 1}
    assert "A worker died" in out.stderr and "raylet: worker died" in out.stderr and "and from Python" in out.stderr
