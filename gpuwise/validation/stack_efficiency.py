"""Per-stack kernel efficiency of the transformer step-time model, fitted and scored on external measured runs.

Rows: ``gpuwise/data/calibration/external_throughput.csv`` (InternEvo, llm.c, ms-swift, universal-llm-trainer; the
file's header says how each source maps to a configuration). A stack without op_efficiency.csv rows of its own is
timed with the rows of the stack it names (stacks.csv) times one factor on its GEMM and attention efficiencies
(``roofline_step.scaled_efficiency``). The factor of a stack is fitted by one rule (``fit_stack_factor``) on that
stack's rows; the stored factors (calibration/stack_efficiency.csv) use all of them, so errors under them are
in-sample. The headline is leave-one-source-out (``loso_errors``): each source is scored with the factor refitted
on the other sources of its stack, or with the stated default (factor 1.0) when no other source has that stack.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from gpuwise.data import data_path, read_commented_csv
from gpuwise.validation.steptime_fit import (
    MeasuredRun,
    RunError,
    model_from_dims,
    predict,
)
from gpuwise.workload.training import ParallelPlan, TrainingConfig

FACTOR_ITERATIONS = 6      # fixed-point steps of the median rule (converges to < 0.1% in 3-4 on these rows)


def _run(r: dict) -> MeasuredRun:
    i = {k: int(r[k]) for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "seq_len", "gpus",
                                "tp", "pp", "dp", "zero", "zero_shard", "micro_batch", "grad_accum", "flash",
                                "lora_rank")}
    model = model_from_dims(r["case"].split()[0], r["family"], i["layers"], i["hidden"], i["heads"], i["kv_heads"],
                            i["ffn"], i["vocab"], i["seq_len"])
    if i["head_dim"]:
        model = replace(model, head_dim=i["head_dim"])
    extra = {"lora_targets": r["lora_targets"]} if r["lora_targets"] else {}
    cfg = TrainingConfig(micro_batch=i["micro_batch"], seq_len=i["seq_len"], grad_accum=i["grad_accum"],
                         precision=r["precision"], recompute=r["recompute"], stack=r["stack"],
                         flash_attention=bool(i["flash"]), lora_rank=i["lora_rank"], quantize=r.get("quantize") or None,
                         padding_mask=r.get("padding_mask") == "1",
                         plan=ParallelPlan(dp=i["dp"], tp=i["tp"], pp=i["pp"], zero=i["zero"],
                                           zero_shard=i["zero_shard"]), **extra)
    value, seq, mb = float(r["value"]), i["seq_len"], i["micro_batch"]
    tokens_step = cfg.global_batch() * seq
    per_gpu = {"tokens/s/gpu": value, "s/step": tokens_step / value / i["gpus"],
               "s/micro-step": mb * seq / value, "samples/s": value * seq / i["gpus"]}[r["unit"]]
    return MeasuredRun(r["source"], r["case"], model, cfg, r["gpu"], 1, float(r["inter_node_gbps"]) or 50.0,
                       per_gpu, "external")


@lru_cache(maxsize=1)
def _all_runs() -> tuple[tuple[MeasuredRun, str], ...]:
    return tuple((_run(r), r["unit"]) for r in read_commented_csv(data_path("calibration", "external_throughput.csv")))


def external_runs() -> tuple[MeasuredRun, ...]:
    """Rows whose unit gives tokens/s/GPU (fit and score the stack factors)."""
    return tuple(r for r, unit in _all_runs() if unit not in RATIO_UNITS)


# samples/s of a dataset whose tokens per sample are not known (ms-swift): only ratios between rows of the same
# max_length are measured (the token count per sample cancels), never an absolute rate
RATIO_UNITS = ("samples/s",)
RATIO_BASE = {"ms-swift": "qwen-7b-chat lora r8 q,k,v len{seq} mb1 acc16", "vertex": "openllama-7b lora r16 len{seq} mb2"}


def ratio_checks() -> list:
    """Ratio of each samples/s row to the source's baseline row at the same max_length (RATIO_BASE), measured vs
    predicted: factor-free checks of the levers and models these sources sweep (LoRA vs full, micro-batch, recompute,
    flash attention, model size). Never fitted on."""
    from gpuwise.validation.throughput import Comparison

    rows = [r for r, unit in _all_runs() if unit in RATIO_UNITS and r.cfg.quantize is None]   # nf4_checks, gptq_checks
    base = {(r.source, r.cfg.seq_len): r for r in rows if r.case == RATIO_BASE[r.source].format(seq=r.cfg.seq_len)}
    out = []
    for r in rows:
        b = base.get((r.source, r.cfg.seq_len))
        if b is None or b is r:
            continue
        out.append(Comparison(f"{r.source}-ratio", f"{r.case} / baseline", r.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu,
                              predict(r) / predict(b)))
    return out


def _nf4_pairs(quantize: str = "nf4") -> list[tuple[MeasuredRun, MeasuredRun]]:
    """(quantised row, the same model's 16-bit LoRA row on the same data) of every source: `quantize` nf4 (case
    " bnb-nf4" or "qlora") or a GPTQ format (case " gptq-int4" ...)."""
    rows = [r for r, unit in _all_runs() if unit in RATIO_UNITS]
    out = []
    for r in (r for r in rows if r.cfg.quantize == quantize):
        twin = r.case.replace(" bnb-nf4", "").replace(f" {quantize}", "").replace(" qlora ", " lora ")
        out.append((r, next(x for x in rows if x.case == twin and x.source == r.source)))
    return out


def _micro_s(run: MeasuredRun, tokens_per_s: float) -> float:
    return run.cfg.micro_batch * run.cfg.seq_len / tokens_per_s


def nf4_checks() -> list:
    """Seconds a 4-bit base adds per micro-step (the nf4 row less its model's 16-bit LoRA row: same data, so the
    unknown tokens per sample cancel), measured vs predicted. ms-swift's rows are the ones NF4_DEQUANT_BW_SHARE is
    fitted on (in-sample, case marked); Vertex's are out of sample (their QLoRA rows also run gradient
    checkpointing, which the prediction includes)."""
    from gpuwise.validation.throughput import Comparison

    out = []
    for r, b in _nf4_pairs():
        measured = _micro_s(r, r.tokens_per_s_per_gpu) - _micro_s(b, b.tokens_per_s_per_gpu)
        predicted = _micro_s(r, predict(r)) - _micro_s(b, predict(b))
        tag = " (in-sample: fit row)" if r.source == "ms-swift" else ""
        out.append(Comparison(f"{r.source}-nf4", f"{r.case} - {b.case}{tag}", measured, predicted))
    return out


def gptq_checks() -> list:
    """Seconds a GPTQ base adds per micro-step (the GPTQ row less its model's 16-bit LoRA row, as `nf4_checks`),
    measured vs predicted: AutoGPTQ's dequantisation timed by the bytes and kernels its code moves at the elementwise
    HBM share (roofline_step.gptq_dequant_s). Nothing is fitted on these rows: all out of sample."""
    from gpuwise.estimate.gptq import FORMATS
    from gpuwise.validation.throughput import Comparison

    out = []
    for q in FORMATS:
        for r, b in _nf4_pairs(q):
            measured = _micro_s(r, r.tokens_per_s_per_gpu) - _micro_s(b, b.tokens_per_s_per_gpu)
            predicted = _micro_s(r, predict(r)) - _micro_s(b, predict(b))
            out.append(Comparison(f"{r.source}-gptq", f"{r.case} - {b.case}", measured, predicted))
    return out


def fit_nf4_share() -> dict[str, float]:
    """The rule behind roofline_step.NF4_DEQUANT_BW_SHARE. Each ms-swift bnb-nf4 row and the same model's 16-bit LoRA
    row ran the same data (same tokens per micro-step, unknown but equal), so their measured time difference per
    micro-step is the dequantisation; the share is the bytes it moves at full bandwidth over that time (launches
    taken off). Per row, and their geometric mean under "fit". Only the bytes come from the model."""
    from gpuwise.estimate.roofline_step import nf4_dequant_s, op_efficiency_for
    from gpuwise.estimate.step_time import roofline_hardware
    from gpuwise.hardware.gpus import get_gpu

    out = {}
    for r, b in (p for p in _nf4_pairs() if p[0].source == "ms-swift"):
        gpu = get_gpu(r.gpu)
        hw, eff = roofline_hardware(gpu, 0.0, 8, r.inter_node_gbps), op_efficiency_for(gpu, r.cfg.stack)   # peak unused
        launch = nf4_dequant_s(r.model, r.cfg, hw, eff, share=float("inf"))
        moved = nf4_dequant_s(r.model, r.cfg, hw, eff, share=1.0) - launch    # seconds at the full bandwidth
        out[r.case] = moved / (_micro_s(r, r.tokens_per_s_per_gpu) - _micro_s(b, b.tokens_per_s_per_gpu) - launch)
    out["fit"] = float(np.exp(np.mean(np.log(list(out.values())))))
    return out


def _arch(run: MeasuredRun) -> str:
    from gpuwise.hardware.gpus import get_gpu

    return get_gpu(run.gpu).architecture.split()[0]


def predict_with_factor(run: MeasuredRun, factor: float) -> float:
    """Predicted tokens/s/GPU of ``run`` with its stack's base rows x ``factor``."""
    from gpuwise.estimate.roofline_step import (
        StackFactor,
        base_efficiency,
        scaled_efficiency,
    )

    eff = scaled_efficiency(base_efficiency(_arch(run), run.cfg.stack), StackFactor(run.cfg.stack, factor, 1, "", ""))
    return predict(run, eff)


def fit_stack_factor(runs) -> float:
    """The rule: the factor at which median log(measured / predicted) over ``runs`` is zero (fixed-point iteration:
    the factor scales GEMM and attention time only, so one multiplicative step under-corrects a little)."""
    k = 1.0
    meas = np.log([r.tokens_per_s_per_gpu for r in runs])
    for _ in range(FACTOR_ITERATIONS):
        k *= float(np.exp(np.median(meas - np.log([predict_with_factor(r, k) for r in runs]))))
    return k


@dataclass
class ScoredRun(RunError):
    """A run's error under one factor, and how that factor was obtained."""

    factor: float = 1.0
    how: str = ""             # "in-sample" | "loso" | "loso-default"


def _by(runs, key) -> dict:
    out: dict = {}
    for r in runs:
        out.setdefault(key(r), []).append(r)
    return out


def fitted_factors(runs=None) -> dict[str, tuple[float, list[MeasuredRun]]]:
    """{stack: (factor fitted on all its rows, rows)}."""
    runs = runs or external_runs()
    return {s: (fit_stack_factor(rs), rs) for s, rs in _by(runs, lambda r: r.cfg.stack).items()}


def in_sample_errors(runs=None) -> list[ScoredRun]:
    out = []
    for k, rs in fitted_factors(runs).values():
        out += [ScoredRun(r, predict_with_factor(r, k), k, "in-sample") for r in rs]
    return out


def loso_errors(runs=None, default: float | None = None) -> list[ScoredRun]:
    """Each source scored with its stack's factor refitted on the other sources of that stack; the stated
    default factor (calibration/stack_efficiency.csv row ``default``) when no other source has the stack."""
    from gpuwise.estimate.roofline_step import stack_factor_table

    runs = runs or external_runs()
    default = stack_factor_table()["default"].factor if default is None else default
    out = []
    for source, rs in _by(runs, lambda r: r.source).items():
        for stack, own in _by(rs, lambda r: r.cfg.stack).items():
            others = [r for r in runs if r.cfg.stack == stack and r.source != source]
            k, how = (fit_stack_factor(others), "loso") if others else (default, "loso-default")
            out += [ScoredRun(r, predict_with_factor(r, k), k, how) for r in own]
    return out


def calibration_loso() -> list[RunError]:
    """Leave-one-source-out errors of the op_efficiency.csv fit (pytorch and megatron rows): each source of
    transformer_throughput.csv + Korthikanti refitted without it (steptime_fit.leave_source_out)."""
    from gpuwise.validation.steptime_fit import leave_source_out, measured_runs

    out = []
    for source in sorted({r.source for r in measured_runs()}):
        out += leave_source_out(source)
    return out


def summary(errors) -> dict[str, dict]:
    """Median / max |error|, signed median and count per source and overall."""
    groups: dict[str, list] = {"all": list(errors)}
    for e in errors:
        groups.setdefault(e.run.source, []).append(e)
    return {k: {"median_error": float(np.median([e.error for e in v])), "max_error": float(max(e.error for e in v)),
                "median_signed": float(np.median([e.predicted / e.run.tokens_per_s_per_gpu - 1 for e in v])),
                "points": len(v), "stack": " ".join(sorted({e.run.cfg.stack for e in v}))}
            for k, v in groups.items() if v}


def write_stack_efficiency() -> dict[str, float]:
    """Rewrite calibration/stack_efficiency.csv's fitted rows (comments and the default row kept)."""
    path = data_path("calibration", "stack_efficiency.csv")
    with open(path) as fh:
        kept = [ln for ln in fh.read().splitlines() if ln.startswith(("#", "stack,", "default,"))]
    fits = fitted_factors()
    for stack, (k, rs) in sorted(fits.items()):
        sources = " ".join(sorted({r.source for r in rs}))
        single = "; one source only: not validated out of sample" if " " not in sources else ""
        kept.append(f"{stack},{k:.3f},{len(rs)},{sources},\"median rule on all {len(rs)} {stack} rows of "
                    f"calibration/external_throughput.csv ({sources}){single}\"")
    with open(path, "w") as fh:
        fh.write("\n".join(kept) + "\n")
    from gpuwise.estimate.roofline_step import op_efficiency, stack_factor_table

    stack_factor_table.cache_clear()
    op_efficiency.cache_clear()
    return {s: k for s, (k, _) in fits.items()}


def _main() -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.stack_efficiency",
                                 description="per-stack factors on the external rows: in-sample and leave-one-source-"
                                             "out errors; --write refits calibration/stack_efficiency.csv")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--rows", action="store_true", help="print every row's leave-one-source-out error")
    args = ap.parse_args()
    if args.write:
        print("factors:", {s: round(k, 3) for s, k in write_stack_efficiency().items()})
    loso = loso_errors()
    if args.rows:
        for e in loso:
            print(f"{e.run.source:22s} {e.run.case:60s} k={e.factor:.3f} measured {e.run.tokens_per_s_per_gpu:8.0f} "
                  f"predicted {e.predicted:8.0f} {e.predicted / e.run.tokens_per_s_per_gpu - 1:+.1%}")
    ratios = ratio_checks()
    if args.rows:
        for c in ratios:
            print(f"{c.source:22s} {c.case:70s} measured {c.measured:.3f} predicted {c.predicted:.3f}")
    print(f"ratio checks ({len(ratios)}): median |error| {np.median([c.error for c in ratios]):.1%}, "
          f"max {max(c.error for c in ratios):.1%}")
    for name, errs in (("leave-one-source-out", loso), ("in-sample", in_sample_errors())):
        for k, v in summary(errs).items():
            print(f"{name:22s} {k:22s} {v['stack']:12s} n={v['points']:3d} median {v['median_error']:.1%} "
                  f"max {v['max_error']:.1%} signed median {v['median_signed']:+.1%}")


if __name__ == "__main__":
    _main()
