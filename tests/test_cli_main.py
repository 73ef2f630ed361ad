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


def test_numpy_loaded_with_one_blas_thread_unless_user_chose():
    """A gpuwise process loads numpy with one OpenBLAS thread (no thread spinning on the other cores) and
    removes the variable again (children get the user's environment); a value the user set is kept."""
    import os

    probe = ("import os, sys; from gpuwise.cli.main import _single_threaded_blas; _single_threaded_blas(); "
             "import numpy; print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    mine = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert mine.stdout.split() == ["1", "None"]
    user = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={**env, "OPENBLAS_NUM_THREADS": "2"})
    assert user.stdout.split()[1] == "2"
