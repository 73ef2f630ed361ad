"""The private local Ray head (`gpuwise.runtime.local_ray`): it comes up with every agent port
chosen up front, listens on loopback only, and a driver killed without cleaning up leaves no Ray
process behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from gpuwise.runtime.local_ray import free_ports  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"), pytest.mark.timeout(240)]


def test_free_ports_are_distinct():
    ports = free_ports(7)
    assert len(set(ports)) == 7 and all(1024 <= p < 65536 for p in ports)


def _group(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pgid=,stat=,comm="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ln.split()[0] == str(pgid) and not ln.split()[1].startswith("Z")]


def _routable_ip() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), None offline."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
    except OSError:
        return None


def _scratch() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("gwray-*"))


def test_a_killed_driver_takes_its_ray_head_with_it(tmp_path):
    before = _scratch()
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from gpuwise.runtime.local_ray import LocalHead
        h = LocalHead(Path({str(tmp_path)!r}) / "ray", 1, {{"T4": 1.0}}, 80 * 1024 * 1024)
        h.start(200.0)
        print(h.proc.pid, h.address, h._short, flush=True)
        time.sleep(600)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = driver.stdout.readline().split()
        assert line, "the head did not start"
        pgid = int(line[0])
        assert any("raylet" in ln for ln in _group(pgid)), _group(pgid)  # Ray runs in the head's group
        scratch = Path(line[2])     # tmp_path is too deep for Ray's socket paths: a short folder is used
        assert scratch in _scratch() - before
        host, port = line[1].rsplit(":", 1)
        assert host == "127.0.0.1", line[1]        # the head binds to loopback, not every interface
        socket.create_connection((host, int(port)), timeout=5).close()
        routable = _routable_ip()
        if routable and not routable.startswith("127."):
            with pytest.raises(OSError):             # refused: nothing listens there
                socket.create_connection((routable, int(port)), timeout=5).close()
    finally:
        driver.send_signal(signal.SIGKILL)  # no finally blocks, no atexit: only the watcher can clean up
        driver.wait()
    deadline = time.monotonic() + 30
    # the watcher ends the group, then a cleaner removes the scratch folder: wait for both (other
    # tests' heads may create scratch folders meanwhile, so only this head's folder is checked)
    while (_group(pgid) or scratch.exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _group(pgid)
    assert not scratch.exists()
