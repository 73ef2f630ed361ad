"""The file protocol between a training script (`gpuwise.elastic`) and the runtime that started it.

The runtime gives every launch of a job a control folder (``GPUWISE_CONTROL_DIR``). At each chunk
boundary every rank appends one JSON line to ``report-<rank>.jsonl`` (rank 0's carries the chunk's
measurements and its checkpoint), then rank 0 waits for ``cmd-<chunk>`` -- ``go``, ``stop`` (rescale or
preemption: exit with STOP_EXIT after the checkpoint) or ``done`` -- and broadcasts it to the other ranks.
Files, not Ray calls, so the script needs nothing but the folder: the runtime's slot actor on the same
node writes the commands and reads the reports. No torch here (the controller side imports it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

STOP_EXIT = 75            # EX_TEMPFAIL: stopped at a boundary to be restarted elsewhere (not an error)
COMMANDS = ("go", "stop", "done")

# environment the runtime sets for a launch (besides torch.distributed's MASTER_ADDR, RANK, ...)
ENV_CONTROL = "GPUWISE_CONTROL_DIR"   # this launch's control folder (absent: standalone)
ENV_JOB_DIR = "GPUWISE_JOB_DIR"       # the job's artifact folder: checkpoints/, logs/
ENV_RESUME = "GPUWISE_RESUME"         # the checkpoint the controller recorded last (absent: fresh)
ENV_BATCH = "GPUWISE_BATCH"           # global batch of this allocation
ENV_REF_BATCH = "GPUWISE_REF_BATCH"   # the job's reference batch M0 (its LR was tuned there)
ENV_CHUNK = "GPUWISE_CHUNK_STEPS"     # steps between boundaries (the checkpoint interval)
ENV_LR_SCALING = "GPUWISE_LR_SCALING"  # sqrt | linear | adascale | none (the job's rule)
ENV_SHARD = "GPUWISE_SHARD"           # "1": the allocation's layout shards (FSDP2)


def report_path(folder: Path, rank: int) -> Path:
    return Path(folder) / f"report-{rank}.jsonl"


def write_report(folder: Path, rank: int, record: dict) -> None:
    with open(report_path(folder, rank), "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_reports(folder: Path, rank: int) -> list[dict]:
    p = report_path(folder, rank)
    if not p.exists():
        return []
    lines = p.read_text().splitlines()
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written: read it next time
            break
    return out


def send_command(folder: Path, chunk: int, cmd: str) -> None:
    """Write ``cmd`` for boundary ``chunk`` (temporary file renamed: read whole or not at all)."""
    if cmd not in COMMANDS:
        raise ValueError(f"command {cmd!r}: use one of {COMMANDS}")
    p = Path(folder) / f"cmd-{chunk}"
    tmp = p.with_suffix(".tmp")
    tmp.write_text(cmd)
    os.replace(tmp, p)


def wait_command(folder: Path, chunk: int, timeout_s: float, poll_s: float = 0.02) -> str:
    """The runtime's command for boundary ``chunk``; ``stop`` if none comes in ``timeout_s`` (the
    controller is gone: keep the checkpoint and exit rather than train unsupervised)."""
    p = Path(folder) / f"cmd-{chunk}"
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if p.exists():
            return p.read_text().strip()
        time.sleep(poll_s)
    return "stop"
