"""The traced grid: `python -m gpuwise.trace.grid --out gpuwise/data/traced/memory_grid.csv`.

One row per configuration (columns in COLUMNS; bytes per GPU of the most loaded rank), covering
families and sizes 100M-405B, dp/tp/pp/cp/ZeRO, every recompute policy, batch and sequence, LoRA and
QLoRA. Rows are appended as they finish; --resume skips rows already in the file, --only/--limit
regenerate part of it."""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuwise.workload.training import ParallelPlan, TrainingConfig

COLUMNS = ("model,family,params,gpus,dp,tp,pp,cp,zero,sp,pp_schedule,micro_batch,seq_len,grad_accum,precision,"
           "optimizer,recompute,lora_rank,quantize,flash,param_bytes,grad_bytes,optimizer_bytes,activation_bytes,"
           "temporary_bytes,other_bytes,peak_allocated_bytes,method,trace_s").split(",")
KEY = COLUMNS[:20]


@dataclass(frozen=True)
class Case:
    model: str
    cfg: TrainingConfig


def _c(model, mb=1, seq=2048, **kw) -> Case:
    plan = kw.pop("plan", ParallelPlan())
    return Case(model, TrainingConfig(micro_batch=mb, seq_len=seq, plan=plan, **kw))


def _p(dp=1, tp=1, pp=1, cp=1, zero=0, sp=None) -> ParallelPlan:
    return ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, zero=zero, sp=tp > 1 if sp is None else sp)


def cases() -> list[Case]:
    """The grid, most informative rows first (an early prefix is already useful)."""
    out: list[Case] = []
    small = ["gpt2", "bert-base", "roberta-base", "t5-base", "bloom-560m", "phi-1.5", "gemma-2b", "llama-3.1-8b",
             "mistral-7b", "qwen2.5-7b", "falcon-7b", "mpt-7b", "gpt-j-6b", "llama-2-7b", "gpt2-medium", "gpt2-large",
             "gpt2-xl", "bert-large", "bloom-1b7", "t5-3b", "t0-3b", "gemma-7b", "llama-2-13b", "gpt-neox-20b",
             "mixtral-8x7b", "mpt-30b", "falcon-40b", "llama-2-70b", "llama-3.1-70b", "mt0-xxl", "bloom-7b1"]
    seq = {"gpt2": 1024, "gpt2-medium": 1024, "gpt2-large": 1024, "gpt2-xl": 1024, "bert-base": 512,
           "bert-large": 512, "roberta-base": 512, "t5-base": 512, "t5-3b": 512, "t0-3b": 512, "mt0-xxl": 512}
    for m in small:                                          # every family, single GPU, two recompute settings
        out.append(_c(m, 1, seq.get(m, 2048)))
        out.append(_c(m, 2, seq.get(m, 2048), recompute="full"))
    r = "llama-3.1-8b"
    for pol in ("none", "selective", "op", "layer-2", "layer-4", "full"):      # every recompute policy
        for flash in (True, False):
            out.append(_c(r, 1, 4096, recompute=pol, flash_attention=flash))
        out.append(_c(r, 2, 8192, recompute=pol, plan=_p(dp=8, zero=3)))
    for n in (8, 16, 32, 64, 128):                            # FSDP 8 -> 128 GPUs (issue's published default)
        out.append(_c(r, 2, 8192, recompute="selective", plan=_p(dp=n, zero=3)))
        out.append(_c(r, 1, 8192, recompute="op", plan=_p(dp=n, zero=3)))
    for cp in (1, 2, 4, 8):                                   # tokens per GPU and GPUs fixed
        out.append(_c(r, 1, 8192 * cp, recompute="full", plan=_p(dp=8 // cp, cp=cp, zero=3)))
        out.append(_c(r, 1, 8192 * cp, recompute="op", plan=_p(dp=8 // cp, cp=cp, zero=3)))
    for prec in ("fp32", "bf16-mixed", "fp16-mixed", "bf16"):
        for opt in ("adamw", "sgd", "adafactor", "adamw-8bit", "adam"):
            out.append(_c(r, 1, 2048, precision=prec, optimizer=opt))
        out.append(_c(r, 1, 4096, precision=prec, plan=_p(dp=8, zero=3)))
    for mb in (1, 2, 4, 8):                                   # batch and sequence
        for s in (1024, 2048, 4096, 8192):
            out.append(_c(r, mb, s, recompute="full" if mb * s > 16384 else "none"))
    for z in (1, 2, 3):
        for dp in (4, 16):
            out.append(_c(r, 1, 4096, plan=_p(dp=dp, zero=z)))
    for tp in (2, 4, 8):
        for sp in (True, False):
            out.append(_c(r, 1, 8192, plan=_p(tp=tp, sp=sp)))
            out.append(_c("llama-3.1-70b", 1, 8192, recompute="op", plan=_p(dp=8, tp=tp, sp=sp, zero=3)))
    for pp in (2, 4, 8):
        for ga in (1, pp, 2 * pp):
            out.append(_c(r, 1, 8192, grad_accum=ga, plan=_p(pp=pp)))
        out.append(_c("llama-3.1-70b", 1, 8192, grad_accum=16, recompute="full", plan=_p(dp=4, tp=8, pp=pp, zero=3)))
    for m in ("llama-3.1-8b", "mistral-7b", "llama-2-13b", "llama-3.1-70b", "qwen2.5-7b", "gpt-j-6b", "falcon-40b",
              "mixtral-8x7b", "t5-3b", "gpt2-xl", "bloom-7b1", "phi-1.5"):
        for rank in (8, 64):
            s = seq.get(m, 2048)
            out.append(_c(m, 2, s, lora_rank=rank))
            out.append(_c(m, 2, s, lora_rank=rank, quantize="nf4"))
        out.append(_c(m, 4, seq.get(m, 2048), lora_rank=16, quantize="nf4", recompute="full"))
    big = "llama-3.1-405b"
    for rc in ("full", "op", "selective"):
        out.append(_c(big, 1, 8192, grad_accum=16, recompute=rc, plan=_p(dp=8, tp=8, pp=8, zero=3)))
        out.append(_c(big, 1, 8192, recompute=rc, plan=_p(dp=64, tp=8, zero=3)))
        out.append(_c("llama-3.1-70b", 1, 8192, recompute=rc, plan=_p(dp=64, zero=3)))
        out.append(_c("llama-3.1-70b", 1, 8192, recompute=rc, plan=_p(dp=16, tp=4, zero=3)))
    for cp in (2, 4, 8):
        out.append(_c(big, 1, 8192 * cp, recompute="full", plan=_p(dp=8, tp=8, cp=cp, zero=3)))
        out.append(_c("llama-3.1-70b", 1, 8192 * cp, recompute="full", plan=_p(dp=8 // cp, tp=8, cp=cp, zero=3)))
    for m in ("bloom", "mixtral-8x7b", "falcon-40b", "gpt-neox-20b", "mpt-30b", "llama-2-70b", "mt0-xxl", "gemma-7b",
              "qwen2.5-7b", "mistral-7b", "phi-1.5", "gpt2-xl", "bloom-1b7", "t5-3b"):
        for n in (8, 64):
            out.append(_c(m, 1, seq.get(m, 2048), recompute="full", plan=_p(dp=n, zero=3)))
        out.append(_c(m, 2, seq.get(m, 2048), recompute="op", plan=_p(dp=8, zero=3)))
    for m in ("gemma-2-2b", "gemma-2-9b"):       # Gemma 2: soft-capping under eager and flash attention, 4 norms
        for flash in (True, False):
            out.append(_c(m, 1, 2048, flash_attention=flash))
            out.append(_c(m, 2, 8192, precision="bf16", recompute="full", lora_rank=8, flash_attention=flash))
    out.append(_c("gemma-2-27b", 1, 8192, recompute="full", plan=_p(dp=8, zero=3)))
    for m in ("gpt2", "gpt2-medium", "bert-base", "roberta-base", "t5-base", "bloom-560m"):
        for mb in (4, 8, 16, 32):
            out.append(_c(m, mb, seq.get(m, 1024), flash_attention=mb != 16))
    unique: dict[tuple, Case] = {}
    for c in out:
        unique.setdefault((c.model, c.cfg), c)
    return list(unique.values())


def row_key(model: str, cfg: TrainingConfig, schedule: str = "1f1b") -> tuple[str, ...]:
    p = cfg.plan
    return tuple(str(v) for v in (model, "", "", p.gpus, p.dp, p.tp, p.pp, p.cp, p.zero, p.sp,
                                  schedule if p.pp > 1 else "none", cfg.micro_batch, cfg.seq_len, cfg.grad_accum,
                                  cfg.precision, cfg.optimizer, cfg.recompute, cfg.lora_rank, cfg.quantize or "",
                                  cfg.flash_attention))


def trace_row(case: Case) -> dict:
    from gpuwise.trace import trace_memory
    from gpuwise.workload.models import load_model, param_count

    spec = load_model(case.model)
    res = trace_memory(spec, case.cfg)
    key = row_key(case.model, case.cfg)
    row = dict(zip(KEY, key))
    row.update(family=spec.family, params=param_count(spec))
    for c, v in res.breakdown().items():
        row[f"{c}_bytes"] = int(round(v))
    row.update(peak_allocated_bytes=int(round(res.peak_allocated_bytes)), method=res.method,
               trace_s=f"{res.trace_s:.1f}")
    return row


def _header(out: Path) -> None:
    import torch

    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        f.write("# Traced per-GPU peak memory (bytes, most loaded rank) of training configurations.\n"
                "# Regenerate: python -m gpuwise.trace.grid --out gpuwise/data/traced/memory_grid.csv\n"
                f"# torch {torch.__version__}, FakeTensorMode + MemTracker/FSDPMemTracker, "
                f"{datetime.date.today().isoformat()}; semantics in gpuwise/trace/__init__.py\n")
        csv.writer(f).writerow(COLUMNS)


def _done(out: Path) -> set[tuple[str, ...]]:
    from gpuwise.data import read_commented_csv

    if not out.exists():
        return set()
    return {tuple(r[k] for k in KEY[:1]) + tuple(r[k] for k in KEY[3:]) for r in read_commented_csv(out)}


def _short(key: tuple[str, ...]) -> tuple[str, ...]:
    return key[:1] + key[3:]


def _merge(out: Path, parts: list[Path]) -> int:
    """Rows of the part files, in the order of cases(), under a fresh header."""
    from gpuwise.data import read_commented_csv

    rows = {}
    for part in parts:
        for r in read_commented_csv(part):
            rows[tuple(r[k] for k in KEY[:1]) + tuple(r[k] for k in KEY[3:])] = r
    _header(out)
    order = [_short(row_key(c.model, c.cfg)) for c in cases()]
    with out.open("a", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        for k in order:
            if k in rows:
                w.writerow(rows.pop(k))
        for r in rows.values():             # rows of an older grid definition stay at the end
            w.writerow(r)
    return 0


def _matches(case: Case, where: list[str]) -> bool:
    row = dict(zip(KEY, row_key(case.model, case.cfg)))
    for cond in where:
        col, _, value = cond.partition("=")
        if row[col] != value:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwise.trace.grid", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="CSV to write")
    ap.add_argument("--only", default=None, help="only rows whose model name contains this text")
    ap.add_argument("--limit", type=int, default=None, help="at most this many rows")
    ap.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                    help="only rows whose key column has this value, e.g. zero=3 (repeat to AND)")
    ap.add_argument("--resume", action="store_true", help="append, skipping rows already in --out")
    ap.add_argument("--part", default=None, metavar="I/N", help="only every N-th row from row I (parallel workers)")
    ap.add_argument("--merge", nargs="+", type=Path, default=None, metavar="CSV",
                    help="write --out from these part files in grid order instead of tracing")
    args = ap.parse_args(argv)
    if args.merge:
        return _merge(args.out, args.merge)
    for cond in args.where:             # bad input: one line, exit 2
        if cond.partition("=")[0] not in KEY or "=" not in cond:
            ap.error(f"--where {cond!r}: give COLUMN=VALUE with COLUMN one of {', '.join(KEY)}")
    todo = [c for c in cases() if (args.only is None or args.only in c.model) and _matches(c, args.where)]
    if args.part:
        i, n = (int(x) for x in args.part.split("/"))
        todo = todo[i::n]
    done = _done(args.out) if args.resume else set()
    if not args.resume or not args.out.exists():
        _header(args.out)
    todo = [c for c in todo if (lambda k: k[:1] + k[3:])(row_key(c.model, c.cfg)) not in done]
    if args.limit is not None:
        todo = todo[: args.limit]
    for i, case in enumerate(todo):
        try:
            row = trace_row(case)
        except Exception as exc:            # one failing configuration must not stop the grid
            print(f"[{i + 1}/{len(todo)}] {case.model} {case.cfg}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        with args.out.open("a", newline="") as f:
            csv.DictWriter(f, COLUMNS).writerow(row)
        print(f"[{i + 1}/{len(todo)}] {case.model} {case.cfg.plan.label()} peak "
              f"{row['peak_allocated_bytes'] / 2**30:.2f} GiB ({row['method']}, {row['trace_s']} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
