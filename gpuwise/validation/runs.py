"""Predictions against the runtime's own measurements: the ``measurements.csv`` a run writes
(`gpuwise.runtime.measurements`), one row per measured chunk.

Per row: the analytic model's uncalibrated step time and reserved peak memory (nothing in them was
fitted on these rows) against the measured ones, as |predicted - measured| / measured, and the
calibrated step time a job's goodput object would have predicted from that job's *earlier* rows only
(`gpuwise.estimate.calibration`, refitted row by row: the calibration's out-of-sample error; empty
until MIN_STEPS earlier steps on the GPU type).

Honest labels: a row measured on a CPU worker (device ``cpu``) times CPU cores against the GPU
roofline of the slot's GPU type, which does not model CPU workers, so its step-time error says how
far the CPU is from that GPU, not how accurate the GPU model is; peak memory exists on CUDA rows only.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuwise.errors import InputError
from gpuwise.estimate.calibration import Observation, fit_calibration

REQUIRED = ("job", "gpu_type", "device", "gpus", "nodes", "batch", "steps", "predicted_step_s", "measured_step_s",
            "predicted_peak_gib", "measured_peak_gib")


@dataclass(frozen=True)
class RunRow:
    job: str
    model: str
    gpu_type: str
    device: str
    gpus: int
    nodes: int
    batch: int
    steps: int
    predicted_step_s: float | None
    measured_step_s: float
    predicted_peak_gib: float | None
    measured_peak_gib: float | None
    calibrated_step_s: float | None = None     # from the job's earlier rows only

    @property
    def cuda(self) -> bool:
        return self.device not in ("", "cpu")

    def observation(self) -> Observation:
        return Observation(self.gpu_type, self.gpus, self.nodes, self.batch, self.steps, self.measured_step_s,
                           self.predicted_step_s, self.measured_peak_gib, self.predicted_peak_gib)


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """|predicted - measured| / measured (None where either is missing)."""
    if predicted is None or measured is None or measured <= 0:
        return None
    return abs(predicted - measured) / measured


def _value(raw, kind, where: str, col: str, optional: bool):
    from gpuwise.user_files import table_cell

    v = table_cell(raw, kind, f"{where} column {col}", optional)
    if v is not None and kind is not str and (not math.isfinite(v) or v < 0):
        raise InputError(f"{where} column {col}", raw, "give a finite number >= 0")
    return v


def _records(path: Path) -> list[dict]:
    text = path.read_text()
    if path.suffix.lower() == ".jsonl":
        out = []
        for i, line in enumerate(text.splitlines(), start=1):
            try:
                rec = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                raise InputError(f"{path} line {i}", line[:60], "each line must be one JSON object") from None
            if rec is not None:
                out.append(rec if isinstance(rec, dict) else {})
        return out
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{path} header", ",".join(reader.fieldnames or ())[:80],
                         f"missing column {missing[0]}; a measurements file has " + ", ".join(REQUIRED))
    return list(reader)


def _row(r: dict, where: str) -> RunRow:
    def get(col: str, kind, optional: bool = False):
        return _value(r.get(col), kind, where, col, optional)

    return RunRow(get("job", str), str(r.get("model") or ""), get("gpu_type", str), str(r.get("device") or ""),
                  get("gpus", int), get("nodes", int), get("batch", int), get("steps", int),
                  get("predicted_step_s", float, True), get("measured_step_s", float),
                  get("predicted_peak_gib", float, True), get("measured_peak_gib", float, True))


def load_runs(path: str | Path) -> list[RunRow]:
    """The rows of a measurements file (or of ``measurements.csv`` in a run's state folder), each with its
    calibrated prediction from the earlier rows of its job; InputError when missing or malformed."""
    p = Path(path)
    if p.is_dir():
        p = p / "measurements.csv"
    if not p.is_file():
        raise InputError("PATH", str(path), "give a measurements.csv (or the run's state folder that holds one)")
    rows, seen = [], {}
    for i, r in enumerate(_records(p), start=1):
        row = _row(r, f"{p} row {i}")
        earlier = seen.setdefault(row.job, [])
        cal = fit_calibration(earlier)
        if row.predicted_step_s is not None and cal.calibrated(row.gpu_type):
            row = RunRow(**{**row.__dict__, "calibrated_step_s": row.predicted_step_s * cal.factor(row.gpu_type)})
        earlier.append(row.observation())
        rows.append(row)
    if not rows:
        raise InputError("PATH", str(p), "the file has no measured rows; run a job with `gpuwise run` first")
    return rows


def summarise(rows: list[RunRow]) -> list[dict]:
    """Median / max |error| per honestly labelled group (groups without a compared row are left out)."""
    groups = [
        ("step time, CUDA rows (uncalibrated model)", [r for r in rows if r.cuda], "predicted_step_s", "measured_step_s"),
        ("step time, CUDA rows (calibrated on earlier rows)", [r for r in rows if r.cuda], "calibrated_step_s",
         "measured_step_s"),
        ("step time, CPU rows: CPU workers vs the GPU roofline (not modelled; not an accuracy)",
         [r for r in rows if not r.cuda], "predicted_step_s", "measured_step_s"),
        ("step time, CPU rows (calibrated on earlier rows)", [r for r in rows if not r.cuda], "calibrated_step_s",
         "measured_step_s"),
        ("peak reserved memory, CUDA rows", [r for r in rows if r.cuda], "predicted_peak_gib", "measured_peak_gib"),
    ]
    out = []
    for label, members, pred, meas in groups:
        errs = [e for r in members if (e := rel_error(getattr(r, pred), getattr(r, meas))) is not None]
        if errs:
            out.append({"group": label, "rows": len(errs), "median_abs_error": float(np.median(errs)),
                        "max_abs_error": float(max(errs))})
    return out
