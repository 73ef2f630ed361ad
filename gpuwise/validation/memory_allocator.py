"""Reserved peaks of external one-GPU runs = PyTorch's caching allocator simulated over the run's recorded
allocations (gpuwise.trace.reserved, as memory --method trace reports it), beside the analytic estimator's reserved
peak on the same rows. Two sources:

- ms-swift Dec-2023 (one A100-80GB, HF Trainer + swift). Lengths: the run's truncation_left keeps a longer sample's
  last max_length tokens, and its data are 3234 +- 2548 tokens a sample, so up to 2048 tokens most batches fill
  max_length (simulated at that fixed length); above 2048 most samples are shorter, so the lengths vary: simulated
  as a lognormal with the data's mean and sd clipped at max_length (the lognormal shape is an assumption; the source
  gives only mean and sd), and at the fixed length too.
- universal-llm-trainer (one H100 / A100-80GB, transformers models in its own loop; its readout is
  torch.cuda.memory_reserved() / 1E9, GB): batches packed to 8192 tokens (fixed length). Its one-GPU rows once each
  (the H100 and A100 read the same), FSDP rows not simulated (one GPU only).

External measured runs, nothing fitted on them by either column; NOT averaged into the memory headline (which stays
the analytic estimator's). OOM rows and rows read at the device's capacity are checks: the replay at the device's
capacity must (not) fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from gpuwise.validation.gpu_runs import abs_error_stats
from gpuwise.validation.memory_external import SWIFT_DEC_CSV, SWIFT_FIXED_UP_TO, SWIFT_GPU, swift_lengths
from gpuwise.workload.training import TrainingConfig

GIB = 2 ** 30
FIXED_UP_TO = SWIFT_FIXED_UP_TO[SWIFT_DEC_CSV]     # max_length up to which the run's batches fill max_length
DATA_MEAN, DATA_SD = 3234, 2548      # the run's data, tokens per sample (the source's CSV header)
SOURCE = "ms-swift Dec-2023 (ms_swift_benchmark_a100_2023_12.csv)"
ULT_SOURCE = "universal-llm-trainer (universal_llm_trainer_gpu_test.csv)"
TITLE = "reserved peak of external one-GPU runs: traced + simulated allocator"
NF4_CAVEAT = ("NF4 base: gpuwise.nn dequantizes NF4 with PyTorch ops (temporaries of the trace), not bitsandbytes' "
              "fused kernels; the traced allocations of the 4-bit path are not the run's")
ASSUMPTIONS = [
    "external measured runs (modelscope/ms-swift docs @ cfcb6726, one A100-80GB; ljm565/universal-llm-trainer "
    "docs/gpu_test.md @ aefdc4a4, one H100 or A100-80GB): nothing fitted on them by the simulated or the analytic "
    "column; not averaged into the memory headline (the analytic estimator's)",
    "simulated reserved = the reserved peak of the run replayed through PyTorch's caching-allocator rules at the "
    "default PYTORCH_CUDA_ALLOC_CONF (gpuwise.trace.reserved.reported_reserved, what memory --method trace reports; "
    "as many steps for varying lengths as it replays, gpuwise.trace.reserved.DEFAULT_STEPS)",
    f"max_length <= {FIXED_UP_TO}: fixed length (the run's truncation_left keeps a longer sample's last max_length "
    f"tokens and its data are {DATA_MEAN} +- {DATA_SD} tokens a sample, so most batches fill max_length)",
    f"max_length > {FIXED_UP_TO}: lengths vary; simulated as lognormal(mean {DATA_MEAN}, sd {DATA_SD}) clipped at "
    "max_length (mean and sd are the source's; the lognormal shape is an assumption), and at the fixed length too",
    "universal-llm-trainer: batches packed to 8192 tokens (fixed length); its readout torch.cuda.memory_reserved() / "
    "1E9 converted from GB to GiB; one row per reading: where its H100 and A100 rows read the same, the H100 row's "
    "configuration (published first, before its --gpu_test: without the padding mask its A100 rows carry)",
    "OOM rows, rows read at >= 95% of the device and capacity-bound rows (the same run reserved more on a larger "
    "card of the source than this one holds): checks, the replay at the device's memory less the CUDA context must "
    "not fit / must fit (the analytic column: estimate_memory(...).fits)",
]


@dataclass(frozen=True)
class Case:
    """One row to simulate: `check` is '' (compared), 'must not fit' (OOM) or 'must fit' (at capacity)."""

    label: str
    model: str                 # gpuwise preset
    cfg: TrainingConfig
    measured_gib: Optional[float]
    check: str
    caveat: str
    varying: bool = False      # its batches vary in length (the validation row's tag)
    source: str = SOURCE
    gpu: str = SWIFT_GPU       # the gpuwise GPU it ran on: its capacity for the checks


@dataclass(frozen=True)
class Simulated:
    lengths: str               # LengthDist.describe()
    reserved_gib: float        # the simulated reserve (reserved.reported_reserved)
    fits: bool                 # the replay at the device's capacity
    oom_step: int              # the step it ran out of memory (0: fits or the build)
    growing: bool
    replay_allocated_gib: float   # the replay's own peaks: `fits` compares these allocations, not trace_memory's
    replay_reserved_gib: float


@dataclass(frozen=True)
class AllocatorRow:
    case: Case
    traced_allocated_gib: float
    fixed: Simulated
    lognormal: Optional[Simulated]        # max_length > FIXED_UP_TO only
    analytic_reserved_gib: float
    analytic_fits: bool

    @property
    def simulated(self) -> Simulated:
        """The column scored: the lognormal one where lengths vary, else the fixed one."""
        return self.lognormal or self.fixed

    def error(self, gib: float) -> Optional[float]:
        m = self.case.measured_gib
        return None if self.case.check or not m else (gib - m) / m

    def passed(self, fits: bool) -> Optional[bool]:
        return None if not self.case.check else fits == (self.case.check == "must fit")


def cases(name: str | None = None) -> list[Case]:
    """The rows `ms_swift_rows(name)` compares or checks (a repeated row is not modelled there, so counted once)."""
    from gpuwise.validation.memory import read_measured
    from gpuwise.validation.memory_external import SWIFT_MODELS, _swift_config, ms_swift_rows

    name = name or SWIFT_DEC_CSV
    out = []
    for r, v in zip(read_measured(name), ms_swift_rows(name)):
        if v.status not in ("compared", "checked"):
            continue
        check = "" if v.status == "compared" else ("must not fit" if r["oom"] else "must fit")
        cfg = _swift_config(r)
        out.append(Case(v.source.partition(" ")[2], SWIFT_MODELS[r["model"]], cfg,
                        v.measured if not r["oom"] else None, check, NF4_CAVEAT if cfg.quantize == "nf4" else "",
                        swift_lengths(name, cfg.seq_len) == "varying", SOURCE, SWIFT_GPU))
    return out


def ult_cases() -> list[Case]:
    """universal-llm-trainer's one-GPU rows that `universal_trainer_rows` compares or checks, once per
    configuration, reading and GPU capacity: where its H100 and A100 rows read the same, the H100 row (first in the
    file; without the padding mask of its later A100 rows, memory_external._ult_config) stands for both."""
    from gpuwise.validation.memory import read_measured
    from gpuwise.validation.memory_external import (ULT_CSV, ULT_GPUS, ULT_MODELS, _ult_config,
                                                    universal_trainer_rows)

    out, seen = [], set()
    for r, v in zip(read_measured(ULT_CSV), universal_trainer_rows()):
        if v.status not in ("compared", "checked") or r["fsdp"] == "True" or r["gpu"] not in ULT_GPUS:
            continue
        check = "" if v.status == "compared" else ("must not fit" if r["oom"] else "must fit")
        key = (ULT_MODELS[r["model"]], r["method"], v.measured, check, ULT_GPUS[r["gpu"]] if check else "")
        if key in seen:
            continue
        seen.add(key)
        cfg = _ult_config(r)
        out.append(Case(f"{r['gpu']} {r['model']} {r['method']}", key[0], cfg, v.measured if not r["oom"] else None,
                        check, NF4_CAVEAT if cfg.quantize == "nf4" else "", False, ULT_SOURCE, ULT_GPUS[r["gpu"]]))
    return out


def capacity_bytes(gpu: str = SWIFT_GPU) -> int:
    """What `gpu`'s allocator may reserve: the device's memory less the CUDA context."""
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.trace.reserved import capacity_bytes as on

    return on(get_gpu(gpu))


def _simulate(replay, traced: int, capacity: int, steps: int) -> Simulated:
    from gpuwise.trace.reserved import replay_on, reported_reserved

    res, (run,) = replay_on(replay, {"device": capacity}, steps)
    return Simulated(res.lengths.describe(), reported_reserved(traced, res) / GIB, run.oom is None, run.at_step,
                     res.growing, res.stats.peak_allocated / GIB, res.stats.peak_reserved / GIB)


def lengths_for(case: Case) -> list:
    """The length distributions a case is replayed at: its fixed max_length, and above FIXED_UP_TO also the
    data's lognormal (mean and sd of the source, clipped at max_length)."""
    from gpuwise.trace.reserved import LengthDist

    fixed = LengthDist("fixed", case.cfg.seq_len)
    if not case.varying:
        return [fixed]
    return [fixed, LengthDist("lognormal", case.cfg.seq_len, mean=DATA_MEAN, sd=DATA_SD, clip=True)]


def simulate_case(case: Case, spec, steps: int | None = None, capacity: int | None = None,
                  recorded: dict | None = None) -> AllocatorRow:
    """One case traced, replayed at fixed length (and lognormal lengths where they vary) and estimated;
    `recorded`: a cache of (traced peak, recording) by model and configuration, shared by cases that differ only
    in their reading or GPU."""
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.trace import trace_memory
    from gpuwise.trace.reserved import DEFAULT_STEPS, record

    cap = capacity_bytes(case.gpu) if capacity is None else capacity
    steps = DEFAULT_STEPS if steps is None else steps
    dists = lengths_for(case)
    key = (spec.name, case.cfg, dists[-1])
    recorded = {} if recorded is None else recorded
    if key not in recorded:      # one recording: the lognormal's lengths include max_length
        recorded[key] = (trace_memory(spec, case.cfg).peak_allocated_bytes, record(spec, case.cfg, dists[-1]))
    traced, replay = recorded[key]
    fixed, *logn = [_simulate(replay.at(d), traced, cap, steps) for d in dists]
    est = estimate_memory(spec, case.cfg)
    return AllocatorRow(case, traced / GIB, fixed, logn[0] if logn else None, est.reserved / GIB,
                        est.fits(get_gpu(case.gpu)))


def simulate_cases(selected: list[Case], spec_for: Callable | None = None, steps: int | None = None,
                   capacity: int | None = None, on_progress=None) -> list[AllocatorRow]:
    """Every case through `simulate_case` (`spec_for(preset)`: the model; load_model by default);
    `capacity`: the allocator's bytes (each case's GPU's by default); `on_progress(done, total)` after each (7B
    rows: tens of seconds, lognormal ones minutes)."""
    from gpuwise.workload.models import load_model

    spec_for = spec_for or load_model
    out, recorded = [], {}
    for c in selected:
        out.append(simulate_case(c, spec_for(c.model), steps, capacity, recorded))
        if on_progress:
            on_progress(len(out), len(selected))
    return out


def summary(rows: list[AllocatorRow]) -> list[dict]:
    """Median / max |error| of the simulated column vs the analytic one on the same compared rows, split into
    fixed-length rows and varying-length rows; and the checks each passes."""
    out = []
    groups = [(SOURCE, f"ms-swift Dec-2023 fixed-length rows (<= {FIXED_UP_TO})", False),
              (SOURCE, "ms-swift Dec-2023 varying-length rows", True),
              (ULT_SOURCE, "universal-llm-trainer rows (8192 tokens packed)", False)]
    for source, label, varying in groups:
        part = [r for r in rows if r.case.source == source and r.case.varying == varying and not r.case.check]
        checks = [r for r in rows if r.case.source == source and r.case.varying == varying and r.case.check]
        if not part and not checks:
            continue
        out.append({"rows": label,
                    "simulated": abs_error_stats([r.error(r.simulated.reserved_gib) for r in part]),
                    "analytic": abs_error_stats([r.error(r.analytic_reserved_gib) for r in part]),
                    "checks": len(checks), "simulated_checks_passed": sum(bool(r.passed(r.simulated.fits))
                                                                        for r in checks),
                    "analytic_checks_passed": sum(bool(r.passed(r.analytic_fits)) for r in checks)})
    return out


def _sim_json(s: Optional[Simulated]) -> Optional[dict]:
    return None if s is None else {"lengths": s.lengths, "reserved_gib": s.reserved_gib, "fits": s.fits,
                                   "oom_step": s.oom_step, "growing": s.growing,
                                   "replay_allocated_gib": s.replay_allocated_gib,
                                   "replay_reserved_gib": s.replay_reserved_gib}


def to_json(rows: list[AllocatorRow]) -> dict:
    return {"title": TITLE, "sources": [SOURCE, ULT_SOURCE],
            "kind": "external measured runs, nothing fitted; not in the headline",
            "rows": [{"case": r.case.label, "source": r.case.source, "gpu": r.case.gpu,
                      "capacity_gib": capacity_bytes(r.case.gpu) / GIB, "model": r.case.model,
                      "max_length": r.case.cfg.seq_len,
                      "check": r.case.check or None, "measured_gib": r.case.measured_gib,
                      "traced_allocated_gib": r.traced_allocated_gib, "fixed": _sim_json(r.fixed),
                      "lognormal": _sim_json(r.lognormal), "error_fixed": r.error(r.fixed.reserved_gib),
                      "error_lognormal": r.error(r.lognormal.reserved_gib) if r.lognormal else None,
                      "analytic_reserved_gib": r.analytic_reserved_gib,
                      "analytic_error": r.error(r.analytic_reserved_gib), "analytic_fits": r.analytic_fits,
                      "simulated_passed": r.passed(r.simulated.fits), "analytic_passed": r.passed(r.analytic_fits),
                      "caveat": r.case.caveat or None} for r in rows],
            "summary": summary(rows), "assumptions": ASSUMPTIONS}
