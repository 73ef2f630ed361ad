"""A slot worker on a real device without Ray: the runtime's CUDA path checked where Ray is not installed.

Runs `gpuwise.runtime.worker.SlotWorker` in this process on ``--device`` (cuda: ``cuda:0``, NCCL; cpu: gloo),
for each built-in model: a process group of one, a chunk of steps with a checkpoint, then a new group that
loads the checkpoint (``map_location``) and trains on. Then the user script ``examples/byo/train.py`` as
torchrun would start one rank of it (RANK 0, LOCAL_RANK 0), in a child process that inherits this
process's CUDA_VISIBLE_DEVICES. Prints one JSON line per check: device name, step times, peak reserved
memory (CUDA), losses. A consistency check of the code path, not a measurement of the slot's speed.

    python benchmarks/runtime_slot_device.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def model_check(worker, name: str, batch: int, tmp: Path) -> dict:
    from gpuwise.runtime.worker import free_port

    job, ck = {"model": name, "seed": 3, "lr": 3e-3}, str(tmp / f"{name}.pt")
    setup_s = worker.setup(job, 0, 1, "127.0.0.1", free_port(), None, 120.0)
    first = worker.chunk(0, 20, batch, 3e-3, ck)
    reload_s = worker.setup(job, 0, 1, "127.0.0.1", free_port(), ck, 120.0)
    after = worker.chunk(20, 10, batch, 3e-3, None)
    where = str(next(worker.model.parameters()).device)
    worker.teardown()
    steps = first["step_s"][5:] + after["step_s"]
    return {"check": name, "device": first["device"], "params_on": where, "setup_s": round(setup_s, 3),
            "reload_s": round(reload_s, 3), "median_step_s": sorted(steps)[len(steps) // 2],
            "peak_gib": None if first["peak_bytes"] is None else first["peak_bytes"] / 2 ** 30,
            "loss_first": first["loss"][0], "loss_at_20": first["loss"][-1], "loss_at_30": after["loss"][-1]}


def script_check(tmp: Path) -> dict:
    from gpuwise.runtime.worker import free_port

    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, str(ROOT / "examples/byo/train.py"), "--steps", "40", "--chunk", "20",
                          "--job-dir", str(tmp / "byo")], env=env, capture_output=True, text=True, timeout=300,
                         check=False)
    return {"check": "examples/byo/train.py", "exit": out.returncode, "wall_s": round(time.perf_counter() - t, 1),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "tail": (out.stdout + out.stderr)[-600:]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args()
    from gpuwise.runtime.worker import SlotWorker

    t = time.perf_counter()
    worker = SlotWorker("check/0", args.device)
    print(json.dumps({"check": "warm-up", "device": worker.device_name(), "s": round(time.perf_counter() - t, 1)}),
          flush=True)
    ok = True
    with tempfile.TemporaryDirectory() as d:
        for name, batch in (("tiny-llama", 16), ("tiny-resnet", 32)):
            r = model_check(worker, name, batch, Path(d))
            ok &= r["loss_at_30"] < r["loss_first"]
            print(json.dumps(r), flush=True)
        r = script_check(Path(d))
        ok &= r["exit"] == 0
        print(json.dumps(r), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
