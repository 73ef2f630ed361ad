"""The analytic memory estimator against the traced grid (gpuwise/data/traced/memory_grid.csv).

The grid is produced by the `trace` engineer's `python -m gpuwise.trace.grid`: real PyTorch runs of
each configuration (or of a few layers, extrapolated; or with a part emulated, as its `method`
column says), one row per configuration, bytes on the most loaded rank. What is compared is the
allocated peak (torch.cuda.max_memory_allocated-style: live tensors only, no allocator slack, no
CUDA context): `MemoryEstimate.allocated` with `context=False` against `peak_allocated_bytes`.
The parts (parameters, gradients, optimizer, activations, temporaries) are reported next to the
trace's parts for diagnosis; they are not scored (the two split transient buffers differently).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from gpuwise.data import data_path, read_commented_csv
from gpuwise.errors import InputError
from gpuwise.estimate.memory import estimate_memory
from gpuwise.workload.training import ParallelPlan, TrainingConfig, recompute_policy

GRID = ("traced", "memory_grid.csv")
TARGET_MEDIAN, TARGET_MAX = 0.03, 0.08
PART_COLUMNS = {"parameters": "param_bytes", "gradients": "grad_bytes", "optimizer": "optimizer_bytes",
                "activations": "activation_bytes", "temporaries": "temporary_bytes"}


@dataclass(frozen=True)
class TraceRow:
    """One grid row compared: measured and predicted allocated peak, with the features it exercises."""

    label: str
    family: str
    features: tuple[str, ...]
    method: str
    measured: float | None           # bytes
    predicted: float | None
    parts: dict[str, tuple[float | None, float]] = field(default_factory=dict)   # part -> (traced, predicted)
    reason: str = ""                 # why a row is not compared

    @property
    def error(self) -> float | None:
        if self.measured is None or self.predicted is None or self.measured <= 0:
            return None
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class TraceReport:
    rows: tuple[TraceRow, ...]
    source: str

    def errors(self, rows=None) -> list[float]:
        return [abs(r.error) for r in (self.rows if rows is None else rows) if r.error is not None]

    def summary(self, rows=None) -> tuple[int, float | None, float | None]:
        """(compared rows, median |error|, max |error|)."""
        e = self.errors(rows)
        return (len(e), statistics.median(e) if e else None, max(e) if e else None)

    def groups(self, key: str) -> dict[str, tuple[int, float | None, float | None]]:
        """Summary per family (key="family") or per feature (key="feature")."""
        names: dict[str, list[TraceRow]] = {}
        for r in self.rows:
            for n in ((r.family,) if key == "family" else r.features):
                names.setdefault(n, []).append(r)
        return {n: self.summary(rs) for n, rs in sorted(names.items())}


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "y")


def _int(row: dict[str, str], name: str, default: int | None = None) -> int:
    v = (row.get(name) or "").strip()
    if not v:
        if default is None:
            raise InputError(f"memory_grid.csv {name}", v, "fill the column (an integer)")
        return default
    return int(float(v))


def _schedule(value: str | None) -> str:
    """The grid writes `none` (or nothing) when there is no pipeline."""
    v = (value or "").strip().lower()
    return "1f1b" if v in ("", "none") else v


def row_config(row: dict[str, str]) -> TrainingConfig:
    """The TrainingConfig a grid row describes."""
    quant = (row.get("quantize") or "").strip().lower()
    plan = ParallelPlan(dp=_int(row, "dp"), tp=_int(row, "tp", 1), pp=_int(row, "pp", 1), cp=_int(row, "cp", 1),
                        sp=_flag(row.get("sp") or ""), zero=_int(row, "zero", 0),
                        pp_schedule=_schedule(row.get("pp_schedule")))
    return TrainingConfig(micro_batch=_int(row, "micro_batch"), seq_len=_int(row, "seq_len"),
                          grad_accum=_int(row, "grad_accum", 1), precision=row["precision"].strip(),
                          optimizer=row["optimizer"].strip(), recompute=row["recompute"].strip(),
                          flash_attention=_flag(row.get("flash") or "1"), lora_rank=_int(row, "lora_rank", 0),
                          quantize=None if quant in ("", "none") else quant, plan=plan)


def row_features(cfg: TrainingConfig) -> tuple[str, ...]:
    p = cfg.plan
    out = [f"zero{p.zero}", cfg.precision, f"recompute:{recompute_policy(cfg.recompute).kind}"]
    out += [name for name, on in (("tp", p.tp > 1), ("sp", p.sp), ("pp", p.pp > 1), ("cp", p.cp > 1),
                                  ("dp", p.dp > 1), ("grad-accum", cfg.grad_accum > 1),
                                  ("lora", cfg.lora_rank > 0 and not cfg.quantize), ("qlora", bool(cfg.quantize)),
                                  ("eager-attention", not cfg.flash_attention)) if on]
    if p.pp > 1:
        out.append(f"schedule:{p.pp_schedule}")
    return tuple(out)


def _compare(row: dict[str, str]) -> TraceRow:
    model = row.get("model", "").strip()
    method = (row.get("method") or "").strip()
    label = (f"{model} dp{row.get('dp')} tp{row.get('tp')} pp{row.get('pp')} cp{row.get('cp')} z{row.get('zero')} "
             f"mb{row.get('micro_batch')}x{row.get('seq_len')} {row.get('precision')} {row.get('recompute')}"
             + (f" lora{row.get('lora_rank')}" if _int(row, "lora_rank", 0) else "")
             + (f" {row.get('quantize')}" if (row.get("quantize") or "").strip() not in ("", "none") else ""))
    family = (row.get("family") or "").strip() or "?"
    measured = float(row["peak_allocated_bytes"]) if (row.get("peak_allocated_bytes") or "").strip() else None
    try:
        cfg = row_config(row)
        est = estimate_memory(model, cfg, context=False)
    except (InputError, ValueError, KeyError) as exc:
        return TraceRow(label, family, (), method, measured, None, reason=f"not modelled: {exc}")
    parts = {k: (float(row[c]) if (row.get(c) or "").strip() else None, getattr(est, k))
             for k, c in PART_COLUMNS.items()}
    return TraceRow(label, family, row_features(cfg), method, measured, est.allocated, parts)


def validate_against_trace(path: str | Path | None = None) -> TraceReport:
    """Every grid row compared (or marked not modelled with the reason)."""
    p = Path(path) if path else data_path(*GRID)
    if not p.exists():
        raise InputError("--grid", str(p), "no traced grid there: generate it with `python -m gpuwise.trace.grid "
                         "--out gpuwise/data/traced/memory_grid.csv` or pass --grid PATH")
    return TraceReport(tuple(_compare(r) for r in read_commented_csv(p)), str(p))


__all__ = ["TraceRow", "TraceReport", "validate_against_trace", "row_config", "TARGET_MEDIAN", "TARGET_MAX"]
