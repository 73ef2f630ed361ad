"""A private local Ray head for `gpuwise run`, started so that it comes up on a loaded machine.

Why not ``ray.init()``: on a busy machine (load ~20 on 2 cores) it failed with "The current node
timed out during startup". Ray's logs showed the cause: the raylet's start-up blocks until the
dashboard agent -- a Python process importing grpc, aiohttp and the agent modules -- writes its
port files, and gives up after a fixed ~15 s per file, aborting (``WaitForDashboardAgentPorts``);
``ray.init`` then times out after its own fixed 30 s. Neither wait can be set through ``ray.init``.

``ray start`` can choose every agent port up front; a raylet that is given its agents' ports does
not wait for their files, so it registers at once however slowly the agents import. So this module
picks free ports, runs ``ray start --head --block`` in a process group of its own (environment:
our PYTHONPATH, so workers need no runtime_env and no runtime-env agent), waits for it under the
caller's deadline, and stops exactly that process group at the end. A small watcher (this module's
``__main__``) leads the group and ends it when the driver dies, so a killed `gpuwise run` leaves no
Ray behind (what ``ray.init()``'s fate sharing gave). Ray's own worker registration
and agent timeouts are raised to that deadline (``RAY_worker_register_timeout_seconds``,
``RAY_agent_register_timeout_ms``), since 8 workers importing torch at once on 2 busy cores take
minutes.

The head binds to loopback: Ray's single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``)
gives 127.0.0.1 as the node address, so GCS, raylet, object manager and workers listen on
127.0.0.1 only (in Ray's cluster mode they listen on every interface of the routable address), and
the dashboard is off. `loopback` sets that mode for this process and the head it starts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MAX_TEMP_CHARS = 40  # + Ray's "/session_<date>_<pid>/sockets/plasma_store" (~65) must stay under 107
PORTS = ("port", "dashboard-port", "dashboard-agent-grpc-port",
         "dashboard-agent-listen-port", "metrics-export-port", "runtime-env-agent-port")


class HeadNotReady(RuntimeError):
    """The local Ray head did not come up (message says why and where its log is)."""


def free_ports(n: int) -> list[int]:
    """n distinct ports free now (held open together, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class LocalHead:
    tmpdir: Path
    num_cpus: int
    resources: dict[str, float]
    object_store_bytes: int
    env: dict[str, str] = field(default_factory=dict)
    num_gpus: int = 0             # real CUDA GPUs advertised (cuda mode); 0: fake slots only
    proc: subprocess.Popen | None = None
    address: str = ""
    _short: Path | None = None    # a short temp folder used instead of a long tmpdir (removed at stop)

    @property
    def log(self) -> Path:
        return self.tmpdir / "ray-start.log"

    def start(self, timeout_s: float) -> str:
        """Start the head and return its GCS address; HeadNotReady after ``timeout_s``."""
        loopback()
        import ray

        self.tmpdir.mkdir(parents=True, exist_ok=True)
        ray_dir = self.tmpdir
        if len(str(ray_dir)) > MAX_TEMP_CHARS:  # Ray's unix sockets live under it: 107-byte path limit
            self._short = ray_dir = Path(tempfile.mkdtemp(prefix="gwray-"))
        ports = dict(zip(PORTS, free_ports(len(PORTS))))
        ip = ray.util.get_node_ip_address()  # 127.0.0.1 (loopback()); ray.init(address=) maps loopback to it
        cmd = [sys.executable, "-m", "gpuwise.runtime.local_ray", str(os.getpid()), str(self._short or "-"),
               sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--disable-usage-stats",
               f"--node-ip-address={ip}", f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}",
               f"--resources={json.dumps(self.resources)}", f"--object-store-memory={self.object_store_bytes}",
               f"--temp-dir={ray_dir}", "--include-dashboard=false",
               *(f"--{k}={v}" for k, v in ports.items())]
        env = {**os.environ, **self.env, "RAY_worker_register_timeout_seconds": str(int(timeout_s)),
               "RAY_agent_register_timeout_ms": str(int(timeout_s * 1000))}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.address = f"{ip}:{ports['port']}"
        self._wait(timeout_s)
        return self.address

    def _wait(self, timeout_s: float) -> None:
        """Until ``ray start`` reports the node up (it then blocks), it exits, or the deadline."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HeadNotReady(f"`ray start` failed; see {self.log}")
            if "Ray runtime started" in self.log.read_text(errors="replace"):
                return
            time.sleep(0.5)
        self.stop()
        raise HeadNotReady(f"the local Ray head was not up after {timeout_s:.0f} s; see {self.log}")

    def stop(self) -> None:
        """End the head's process group (watcher, GCS, raylet, agents; workers die with the raylet):
        SIGTERM, then SIGKILL after GRACE_S (Ray's daemons may ignore SIGTERM; nothing of a run's
        state lives in Ray, it is all in the SQLite file)."""
        if self.proc is not None:
            _end_group(self.proc.pid, self.proc)  # start_new_session: the group is ours alone
            self.proc = None
        if self._short is not None:
            shutil.rmtree(self._short, ignore_errors=True)
            self._short = None


def loopback() -> None:
    """Ray's single-machine mode for this process and what it starts: node address 127.0.0.1.

    Ray reads the switch once, when it is imported; a driver that imported Ray already (a test, a
    notebook) gets the same by Ray's constant, read at each call of its node-address lookup. Only
    for a head of our own: a driver joining a cluster (--address) must keep its routable address."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if "ray" in sys.modules:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False


GRACE_S = 3.0


def _end_group(pgid: int, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group, SIGKILL it after GRACE_S."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        if leader is not None:
            try:
                leader.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        else:
            time.sleep(GRACE_S)
        os.killpg(pgid, signal.SIGKILL)
        if leader is not None:
            leader.wait(timeout=GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def _watch(parent: int, scratch: str, cmd: list[str]) -> None:
    """Run ``cmd`` (ray start --block) in this process group; end the group (this watcher too)
    when it exits or when ``parent`` (the driver) is gone, removing ``scratch`` ("-": none)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a SIGTERM to the group is for Ray's processes
    child = subprocess.Popen(cmd, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    while child.poll() is None and os.getppid() == parent:
        time.sleep(1.0)
    if child.poll() is not None:
        print(f"gpuwise: `ray start` exited with code {child.returncode}", file=sys.stderr, flush=True)
    if scratch != "-" and os.getppid() != parent:  # the driver cannot clean up any more
        # removed by a process outside the group once the group is gone (Ray's processes write into
        # it until they die, and this watcher dies with them)
        subprocess.Popen([sys.executable, "-m", "gpuwise.runtime.local_ray", "--clean", str(os.getpgrp()), scratch],
                         start_new_session=True, stdin=subprocess.DEVNULL)
    _end_group(os.getpgrp())


def _clean(pgid: int, scratch: str, limit_s: float = 60.0) -> None:
    """Remove ``scratch`` once process group ``pgid`` has no process left (or after ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(0.2)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1] == "--clean":
        _clean(int(sys.argv[2]), sys.argv[3])
    else:
        _watch(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
