"""What the runtime measures on each shape, fed back to the job's goodput object and written down as
validation data.

Per job the runtime keeps the job's goodput object (`gpuwise.estimate.goodput.JobGoodput`, the one the
planner and the policies ask) where the job has one: a submitted job spec's own; for a built-in model
job (`application`) or a model + data job whose model is a runtime model, the spec of that model at the
job's batch range and training amount (fp32: the slot workers train in full precision); none for a
user's script (`entrypoint`: nothing says what it trains). Every chunk's mean in-worker step time
(forward, backward, all-reduce and optimizer step; not the checkpoint or the Ray call) and, on CUDA,
its peak reserved memory are `JobGoodput.observe`d (which refits its measured calibration) and
appended to ``measurements.csv`` in the run's state folder, one row per chunk
(`gpuwise validate runs` reads it).

On the CPU slot workers the predicted step time is the GPU roofline's for the slot's GPU type: the
measured/predicted ratio there is a calibration of CPU workers, not a validation of the GPU model
(`gpuwise validate runs` says so per row).
"""

from __future__ import annotations

import csv
import math
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from gpuwise.errors import InputError

FILE = "measurements.csv"
COLUMNS = ("job", "model", "entrypoint", "gpu_type", "device", "gpus", "nodes", "batch", "steps",
           "predicted_step_s", "measured_step_s", "predicted_peak_gib", "measured_peak_gib", "commit", "time_utc")


def runtime_spec(job):
    """The job spec of a runtime job's model (see the module docstring), or None (a script)."""
    from gpuwise.data import data_path
    from gpuwise.runtime.small_models import small_models
    from gpuwise.workload.jobspec import parse_job

    name = job.application
    if job.argv is not None:          # a model + data job: its --model, if a runtime model
        argv = list(job.argv)
        ref = argv[argv.index("--model") + 1] if "--model" in argv else ""
        name = Path(ref).stem if ref.endswith(".json") else ref
    m = small_models().get(name)
    if m is None:
        return None
    m0 = int(job.batch_size)
    lo, hi = int(job.min_batch or m0), int(job.max_batch or 4 * m0)
    if m.kind == "lm":
        # the worker's torch.optim.AdamW defaults: foreach on the GPUs the predictions are for (runtime/worker.py)
        model, seq = str(data_path("runtime_models", f"{m.name}.json")), {"seq_len": m.seq_len,
                                                                         "optimizer_impl": "foreach"}
    else:
        meta = m.config["gpuwise"]
        model, seq = {"name": m.name, "sample_unit": "image", **{k: float(meta[k]) for k in (
            "params", "flops_per_sample", "activation_bytes_per_sample")}}, {}
    return parse_job({"name": job.name, "model": model, "parallelism": {"tp": [1], "pp": [1], "zero": [0]},
                      "training": {"samples": float(max(1, job.steps) * m0), "global_batch": [lo, hi],
                                   "reference_batch": m0, "precision": "fp32", **seq}})


def job_goodput(job, spec=None):
    """The goodput object the runtime calibrates for ``job``: from ``spec`` (a submitted job spec) or
    `runtime_spec`; None where the job has none (a script) or its spec cannot be modelled."""
    from gpuwise.estimate.goodput import JobGoodput

    spec = spec if spec is not None else runtime_spec(job)
    if spec is None:
        return None
    try:
        return JobGoodput.from_jobspec(spec, require_amount=False)
    except InputError:
        return None


@lru_cache(maxsize=1)
def source_commit() -> str:
    """The project's git commit (empty outside a checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _num(v, digits: int = 9) -> str:
    return "" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


class MeasurementLog:
    """``measurements.csv`` of one run: one row per measured chunk, appended as it happens."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def record(self, job, gpu_type: str, device: str, gpus: int, nodes: int, batch: int, steps: int,
               step_s: float, peak_gib: float | None, good, gpus_per_node: int) -> dict:
        """Feed one chunk to ``good`` (None: no goodput object), write its row and return it."""
        obs = good.observe(gpu_type, gpus_per_node, gpus, nodes, batch, steps, step_s, peak_gib) if good else None
        entry = " ".join([Path(job.argv[0]).name, *job.argv[1:]]) if job.argv else ""
        row = {"job": job.name, "model": "" if good is None else good.space.model.name, "entrypoint": entry,
               "gpu_type": gpu_type, "device": device, "gpus": gpus, "nodes": nodes, "batch": batch, "steps": steps,
               "predicted_step_s": _num(obs.predicted_step_s if obs else None), "measured_step_s": _num(step_s),
               "predicted_peak_gib": _num(obs.predicted_peak_gib if obs else None), "measured_peak_gib": _num(peak_gib),
               "commit": source_commit(), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        new = not self.path.exists() or self.path.stat().st_size == 0
        with self.path.open("a", newline="") as f:
            w = csv.DictWriter(f, COLUMNS)
            if new:
                w.writeheader()
            w.writerow(row)
        return row

    def replay(self, name: str, good) -> int:
        """Feed ``good`` the chunks of job ``name`` this file already holds (a resumed run or a restarted
        server: the calibration continues where it was); returns how many. Unreadable rows are skipped:
        the file is validation output, not the run's state."""
        if good is None or not self.path.is_file():
            return 0
        n = 0
        with self.path.open(newline="") as f:
            for r in csv.DictReader(f):
                if r.get("job") != name:
                    continue
                try:
                    gpus, nodes = int(r["gpus"]), int(r["nodes"])
                    peak = float(r["measured_peak_gib"]) if r.get("measured_peak_gib") else None
                    good.observe(r["gpu_type"], math.ceil(gpus / max(1, nodes)), gpus, nodes, int(r["batch"]),
                                 int(r["steps"]), float(r["measured_step_s"]), peak)
                    n += 1
                except (KeyError, TypeError, ValueError, ZeroDivisionError):   # e.g. gpus 0: not a chunk
                    continue
        return n


def summarise(prev: dict | None, row: dict, good) -> dict:
    """A job's measured-vs-predicted summary after one more chunk ``row`` (the job page and
    ``gpuwise jobs ID`` show it): chunks and steps so far, the last chunk's shape with its predicted
    (uncalibrated) and measured step time and peak, and the calibration's own words."""
    prev = prev or {"chunks": 0, "steps": 0}
    keep = ("gpu_type", "device", "gpus", "nodes", "batch", "predicted_step_s", "measured_step_s",
            "predicted_peak_gib", "measured_peak_gib")
    last = {k: (float(row[k]) if k.endswith(("_s", "_gib")) and row[k] != "" else (row[k] if row[k] != "" else None))
            for k in keep}
    return {"chunks": prev["chunks"] + 1, "steps": prev["steps"] + int(row["steps"]), "last": last,
            "calibration": [] if good is None else good.calibration.notes(),
            "note": ("CPU slot workers against the GPU roofline of their slot type: a calibration, not an accuracy"
                     if last["device"] in ("cpu", None) else "CUDA: measured on the GPU")}
