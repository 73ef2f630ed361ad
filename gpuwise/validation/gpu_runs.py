"""The model against real training steps measured on a lent GPU (`gpu_measure`'s CSVs).

Two sets, kept apart because they played different parts:
- ``grid`` (gpuwise/data/measured/gpu/gpu_runs.csv): the first run's configurations. After it, the peaks of
  six rows were taken apart (`gpu_peak`) and the optimizer_impl lever was added: in-sample for those changes.
  The one-GPU allocator slack (estimate/overhead.py SLACK["one GPU"]) is fitted on their measured
  reserved / allocated ratios (with peft issue #1469's rows), so their reserved errors are in-sample too
  (`gpuwise validate memory` scores them leave-one-source-out); no other constant is fitted on them.
- ``check`` (gpuwise/data/measured/gpu/gpu_check_runs.csv): configurations chosen before those changes and
  scored only after them: held out (the slack fit never reads them).

Each row is one configuration measured on one GPU: max_memory_allocated / max_memory_reserved of the last
of four steps and the median step time, next to what `estimate_memory` and `step_of` predict for the
same configuration today (the CSV's predicted columns are what the code predicted on the day of the run).
Where the harness runs a lever differently from what the model describes, the row says so (``caveat``).

On request (`with_simulation`), each row's reserved peak is also predicted by replaying the configuration's
traced allocations (gpuwise.nn's build and steps under FakeTensorMode, the harness's own ``train_step``) through
PyTorch's caching-allocator rules (gpuwise.trace.reserved). Nothing in it is fitted on any measured row; both
sets' results were seen while it was written (a prototype ran on them first) and no rule was changed after, so
its errors are "nothing fitted, looked at"; the fitted-fraction reserved stays in-sample on the grid.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "measured" / "gpu"
# varying: drawn lengths and two micro-batches a step (gpu_measure --set varying), not yet measured: no file, no rows
SETS = {"grid": DATA / "gpu_runs.csv", "check": DATA / "gpu_check_runs.csv", "varying": DATA / "gpu_varying_runs.csv"}
RUNTIME = DATA / "runtime_h200_smoke.csv"      # `gpuwise run --devices cuda` on the same machine (runtime/measurements)
GIB = 2 ** 30
SIMULATED = "reserved_simulated"     # the quantity: the caching allocator simulated over the traced allocations
QUANTITIES = ("allocated", "reserved", SIMULATED, "tokens_per_s")
LABELS = {"allocated": "allocated", "reserved": "reserved (fitted fraction)",
          "reserved_on_simulated_rows": "reserved (fitted), simulated rows",
          SIMULATED: "reserved (simulated allocator)", "tokens_per_s": "tokens/s"}
# levers the harness runs otherwise than the model describes them (docs/gpu-runs.md)
CAVEATS = {
    "activation_offload": ("harness: PyTorch's save_on_cpu (every saved tensor, synchronous copies); the model: "
                           "torchtune-style offload on a side stream with the last blocks kept"),
    "nf4": "harness: gpuwise.nn dequantizes NF4 with PyTorch ops, not bitsandbytes' kernels (step time)",
}


@dataclass(frozen=True)
class GpuRow:
    set: str
    device: str
    model: str
    entry: tuple            # gpu_measure grid entry
    measured_allocated_gib: float
    measured_reserved_gib: float
    measured_tokens_per_s: float | None     # None: drawn lengths or two micro-batches a step
    predicted_allocated_gib: float
    predicted_reserved_gib: float
    predicted_tokens_per_s: float | None
    caveat: str
    simulated_reserved_gib: float | None = None     # with_simulation: the simulated allocator's reserved peak
    simulation_note: str = ""                       # why it was not simulated, or whether the reserve was steady

    @property
    def errors(self) -> dict[str, float | None]:
        def rel(p, m):
            return None if p is None or not m else (p - m) / m
        return {"allocated": rel(self.predicted_allocated_gib, self.measured_allocated_gib),
                "reserved": rel(self.predicted_reserved_gib, self.measured_reserved_gib),
                SIMULATED: rel(self.simulated_reserved_gib, self.measured_reserved_gib),
                "tokens_per_s": rel(self.predicted_tokens_per_s, self.measured_tokens_per_s)}


def config_key(r: dict) -> tuple:
    """A measured row's configuration: (model, micro_batch, seq_len, precision, recompute, lora_rank, quantize,
    levers)."""
    return (r["model"], int(r["micro_batch"]), int(r["seq_len"]), r["precision"], r["recompute"],
            int(r["lora_rank"]), r["quantize"] or None, r.get("levers", ""))


def measured_rows(path: Path) -> list[dict]:
    """The last row of each configuration that ran (a resumed run appends; error rows were measured again)."""
    from gpuwise.validation.gpu_measure import KEY

    last: dict[tuple, dict] = {}
    if not path.exists():               # a set not measured yet
        return []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            last[tuple(r.get(k, "") for k in KEY)] = r
    return [r for r in last.values() if r["status"] == "ok"]


def config_caveat(entry: tuple) -> str:
    """The caveats (CAVEATS) that apply to a configuration (config_key), joined; '' for none."""
    keys = [k for k in CAVEATS if k in entry[7] or entry[6] == k]
    return "; ".join(CAVEATS[k] for k in keys)


def compare(set_name: str, path: Path | None = None) -> list[GpuRow]:
    """Today's predictions for every measured row of a set."""
    from gpuwise.hardware.gpus import resolve_gpu_name
    from gpuwise.validation.gpu_measure import config, predicted
    from gpuwise.workload.models import load_model

    out = []
    for r in measured_rows(path or SETS[set_name]):
        e = config_key(r)
        alloc, res, tps = predicted(load_model(e[0]), config(*e[1:]), resolve_gpu_name(r["device"]))
        out.append(GpuRow(set_name, r["device"], e[0], e, float(r["measured_allocated_gib"]),
                          float(r["measured_reserved_gib"]), _float(r["measured_tokens_per_s"]), alloc / GIB,
                          res / GIB, tps if r["measured_tokens_per_s"] else None, config_caveat(e)))
    return out


def _float(text: str) -> float | None:
    return float(text) if text else None      # drawn lengths / two micro-batches a step: no tokens/s


def simulate_row(row: GpuRow) -> GpuRow:
    """The row with its simulated reserved peak: the harness's exact config (gpu_measure.config, foreach AdamW)
    traced and replayed through the caching allocator (gpuwise.trace.reserved); or, where the trace refuses the
    configuration, the reason ("not simulated: ...")."""
    from gpuwise.errors import InputError
    from gpuwise.trace.memory import trace_refusal
    from gpuwise.trace.reserved import simulate_reserved, simulation_refusal
    from gpuwise.validation.gpu_measure import config, lengths_of
    from gpuwise.workload.models import load_model

    spec, cfg = load_model(row.model), config(*row.entry[1:])
    drawn = lengths_of(row.entry[7], cfg.seq_len)      # the harness's draws: same LengthDist, same seed
    why = simulation_refusal(cfg) or trace_refusal(spec, cfg)
    if not why:
        try:
            res = simulate_reserved(spec, cfg, drawn)
        except InputError as e:
            why = e.fix
        else:
            note = (f"{res.steps} steps, {res.stats.segments} segments, "
                    + ("still growing" if res.growing else "steady"))
            return replace(row, simulated_reserved_gib=res.stats.peak_reserved / GIB, simulation_note=note)
    return replace(row, simulation_note=f"not simulated: {why}")


def with_simulation(rows: list[GpuRow], on_progress=None) -> list[GpuRow]:
    """Every row through `simulate_row` (seconds to tens of seconds each); `on_progress(done, total)` after each."""
    out = []
    for r in rows:
        out.append(simulate_row(r))
        if on_progress:
            on_progress(len(out), len(rows))
    return out


def sample(set_name: str, quantity: str) -> str:
    """How independent a set's errors of a quantity are (see the module docstring)."""
    if quantity == SIMULATED:
        return "nothing fitted (looked at while written)"
    if set_name in ("check", "varying"):
        return "held out"
    if quantity == "reserved":
        return "in-sample (fitted on these)"
    return "in-sample (looked at)"


def summary(rows: list[GpuRow], quantity: str, *, skip_caveats: bool = False) -> dict:
    """Median and max |error| of one quantity over rows (optionally without the rows with a caveat), and the
    most optimistic error: the largest memory under-prediction (runs out of memory) or tokens/s
    over-prediction (misses its deadline); 0 when every row errs the safe way."""
    errs = [r.errors[quantity] for r in rows if r.errors[quantity] is not None
            and not (skip_caveats and r.caveat)]
    if not errs:
        return {"rows": 0}
    optimistic = max(max(errs), 0.0) if quantity == "tokens_per_s" else min(min(errs), 0.0)
    return {**abs_error_stats(errs), "most_optimistic": optimistic}


def abs_error_stats(errs: list[float]) -> dict:
    """Rows, median and max |error| of relative errors (None for no rows)."""
    if not errs:
        return {"rows": 0, "median_abs_error": None, "max_abs_error": None}
    return {"rows": len(errs), "median_abs_error": statistics.median(abs(e) for e in errs),
            "max_abs_error": max(abs(e) for e in errs)}


def summary_table(rows: list[GpuRow], simulated: bool) -> list[dict]:
    """`summary` per set, quantity and caveat choice, each labelled with how independent it is (`sample`). With
    the simulation, the fitted-fraction reserved also on only the rows simulated (the same rows, side by side)."""
    quantities = [(q, q, False) for q in QUANTITIES if q != SIMULATED or simulated]
    if simulated:
        quantities.insert(2, ("reserved", "reserved_on_simulated_rows", True))
    return [{"set": s, "quantity": key, "label": LABELS[key], "sample": sample(s, q),
             "caveat_rows": "without" if skip else "with",
             **summary([r for r in rows if r.set == s and (not same or r.simulated_reserved_gib is not None)], q,
                       skip_caveats=skip)}
            for s in SETS if any(r.set == s for r in rows)          # a set not measured yet: no lines
            for q, key, same in quantities for skip in (True, False)]


@dataclass(frozen=True)
class RuntimeRow:
    """One built-in model's steps in the runtime's measurement log: the median measured step, the prediction
    the runtime recorded then, and today's (its goodput object, uncalibrated)."""

    job: str
    model: str
    gpu_type: str
    gpus: int
    batch: int
    steps: int                       # measured chunks
    measured_step_s: float
    recorded_step_s: float | None
    today_step_s: float | None

    @property
    def error(self) -> float | None:
        return None if self.today_step_s is None else (self.today_step_s - self.measured_step_s) / self.measured_step_s


def runtime_rows(path: Path = RUNTIME) -> list[RuntimeRow]:
    """The runtime log's built-in-model jobs (a user script has no model to predict) against today's model."""
    from gpuwise.runtime.measurements import job_goodput
    from gpuwise.runtime.workload import RunJob

    groups: dict[tuple, list[dict]] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if r["model"]:
                groups.setdefault((r["job"], r["model"], r["gpu_type"], int(r["gpus"]), int(r["batch"])), []).append(r)
    out = []
    for (job, model, gpu, gpus, batch), rs in groups.items():
        good = job_goodput(RunJob(name=job, arrival_s=0, num_gpus=gpus, batch_size=batch, application=model,
                                  steps=int(rs[0]["steps"])))
        best = good.predicted_at_batch(gpu, gpus, gpus, batch) if good else None
        recorded = [float(r["predicted_step_s"]) for r in rs if r["predicted_step_s"]]
        out.append(RuntimeRow(job, model, gpu, gpus, batch, len(rs), statistics.median(float(r["measured_step_s"])
                                                                                       for r in rs),
                              statistics.median(recorded) if recorded else None, best.step_time_s if best else None))
    return out
