"""Script jobs on a slot actor: the user's training script runs inside the (warm) actor process.

A launch sets torch.distributed's environment (MASTER_ADDR/PORT, RANK, WORLD_SIZE, LOCAL_RANK 0: a
slot actor sees its one GPU) and gpuwise.elastic's (`gpuwise.elastic.control`), sends the script's
output to ``<job dir>/logs/rank<r>.log`` and runs it as ``__main__`` in a thread, so torch and the
libraries the warm-up imported are not paid again. ``wait`` returns the script's next boundary report
(an elastic script) or its exit. Stopping is the script's own doing at a boundary (command ``stop``);
a script that does not use gpuwise.elastic is only ever stopped by restarting the actor, which kills it.
The job folder must be on storage every node sees (one machine here).

Devices: the script shares the actor's process and so its environment -- on a CUDA slot, Ray's
CUDA_VISIBLE_DEVICES naming the slot's one GPU (the script's ``cuda:0``, LOCAL_RANK 0, NCCL); on a
fake CPU slot, the empty CUDA_VISIBLE_DEVICES the worker set (`gpuwise.runtime.worker`): gloo on the CPU.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path

from gpuwise.elastic import control as ctl


PG_TIMEOUT_S = 30  # a collective waiting on a lost peer gives up after this (gloo usually sees the loss at once)


def uses_elastic(path: str | Path) -> bool:
    """Whether a script imports gpuwise.elastic (an elastic job) or not (a rigid one): its imports,
    parsed (a comment or string naming the module does not count)."""
    import ast

    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return False  # it fails at launch; its log says why
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.startswith("gpuwise.elastic") for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and (
                node.module.startswith("gpuwise.elastic")
                or (node.module == "gpuwise" and any(a.name == "elastic" for a in node.names))):
            return True
    return False


class ScriptRun:
    def __init__(self, job: dict, rank: int, world: int, master: str, port: int) -> None:
        self.job, self.rank = job, rank
        self.control = Path(job["control_dir"])
        self.log = Path(job["job_dir"]) / "logs" / f"rank{rank}.log"
        self.env = {"MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
                    "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                    ctl.ENV_CONTROL: str(self.control), ctl.ENV_JOB_DIR: job["job_dir"],
                    ctl.ENV_RESUME: job.get("resume") or "", ctl.ENV_BATCH: str(job["batch"]),
                    ctl.ENV_REF_BATCH: str(job["ref_batch"]), ctl.ENV_CHUNK: str(job["chunk_steps"]),
                    ctl.ENV_LR_SCALING: job.get("lr_scaling") or "",
                    "GPUWISE_PG_TIMEOUT_S": str(PG_TIMEOUT_S)}
        self.exit: int | None = None
        self.thread = threading.Thread(target=self._main, name=f"script-{job['name']}", daemon=True)

    def start(self) -> None:
        self.control.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        os.environ.update(self.env)
        self.thread.start()

    def _main(self) -> None:
        argv = list(self.job["argv"])
        out, err, path0, cwd = sys.stdout, sys.stderr, list(sys.path), os.getcwd()
        code = 1
        with open(self.log, "a", buffering=1) as log:
            sys.stdout = sys.stderr = log
            print(f"--- launch rank {self.rank}: {' '.join(argv)} ({time.strftime('%H:%M:%S')})", flush=True)
            try:
                sys.argv = argv
                sys.path.insert(0, str(Path(argv[0]).parent))
                os.chdir(self.job.get("cwd") or cwd)
                runpy.run_path(argv[0], run_name="__main__")
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # the script's error, in its log; the runtime sees the exit code
                traceback.print_exc(file=log)
            finally:
                _leave_group()
                print(f"--- exit {code}", flush=True)
                sys.stdout, sys.stderr, sys.path[:] = out, err, path0
                os.chdir(cwd)
        self.exit = code

    def wait(self, after: float, timeout_s: float) -> dict:
        """The first report past boundary ``after``, else the exit code, else a timeout record."""
        end = time.monotonic() + timeout_s
        while True:
            recs = [r for r in ctl.read_reports(self.control, self.rank) if r.get("boundary", -1) > after]
            if recs:
                return recs[0]
            if self.exit is not None:
                return {"kind": "exit", "exit": self.exit, "log": str(self.log)}
            if time.monotonic() > end:
                return {"kind": "timeout", "log": str(self.log)}
            time.sleep(0.02)


def _leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
