"""`gpuwise memory --method analytic` against `--method trace` at realistic widths (issue #21).

llama-3.1-70b- and 405b-shaped models (the presets' config.json: hidden, heads, GQA KV heads, MLP width,
vocabulary 128256) cut to a few layers, so that the trace runs every layer (no extrapolation), under
torchtitan's layout: bf16-mixed FSDP2 over dp=8, TP 8 with sequence parallelism, micro-batch 1, each
recompute policy, and PP 2 / 4 (per-stage depth 2-4). Each method is run through the CLI itself
(`gpuwise memory CONFIG.json ... --json`), and the allocated peak and its parts are compared. Three
depths per row give each method's per-layer slope and fixed intercept (differences, nothing fitted).
This is a consistency check of two of our own models (the trace is real PyTorch under FakeTensorMode,
with TP as one rank's shapes): not a measurement.

Usage: python benchmarks/mem_tp_trace.py [--quick] [--models 70b,405b] [--out FILE.csv]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import sys
import tempfile
from pathlib import Path

from gpuwise.cli.main import main as cli
from gpuwise.data import data_path

GIB = 2 ** 30
PARTS = ("parameters", "gradients", "optimizer", "activations", "temporaries")


def config_file(folder: Path, model: str, layers: int) -> str:
    """The preset's config.json with `layers` layers (every other field as published)."""
    cfg = json.loads(data_path("models", f"llama-3.1-{model}.json").read_text())
    cfg["num_hidden_layers"] = layers
    cfg["gpuwise"] = {"name": f"llama-3.1-{model}-{layers}l"}
    path = folder / f"llama-3.1-{model}-{layers}l" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return str(path)


def flags(seq: int, recompute: str, pp: int) -> list[str]:
    ga = 2 * pp if pp > 1 else 1
    return ["--stack", "torchtitan", "--precision", "bf16-mixed", "--batch-size", "1", "--seq-len", str(seq),
            "--gpus", str(64 * pp), "--tp", "8", "--sp", "--zero", "3", "--pp", str(pp), "--grad-accum", str(ga),
            "--recompute", recompute]


def memory(path: str, args: list[str], method: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli(["memory", path, *args, "--method", method, "--json"])
    if rc:
        raise SystemExit(f"gpuwise memory {path} {' '.join(args)} --method {method}: exit {rc}")
    return json.loads(out.getvalue())


def cases(quick: bool, models: list[str]) -> list[tuple[str, int, str, int]]:
    """(model, seq, recompute, pp)."""
    if quick:
        return [(m, 8192, r, 1) for m in models for r in ("none", "full")]
    out = [(m, 8192, r, 1) for m in models for r in ("none", "op", "selective", "full")]
    out += [(m, 4096, r, 1) for m in models for r in ("none", "full")]
    out += [(m, 8192, r, pp) for m in models for pp in (2, 4) for r in ("none", "full")]
    return out


def run(quick: bool, models: list[str], out_csv: str | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, seq, rec, pp in cases(quick, models):
            for per_stage in (2, 3, 4):
                layers = per_stage * pp
                path = config_file(Path(tmp), model, layers)
                a, t = (memory(path, flags(seq, rec, pp), m) for m in ("analytic", "trace"))
                row = {"model": model, "seq": seq, "recompute": rec, "pp": pp, "layers": layers,
                       "trace_gib": t["allocated_gib"], "analytic_gib": a["allocated_gib"],
                       "error": a["allocated_gib"] / t["allocated_gib"] - 1,
                       "trace_phase": t["peak_phase"], "analytic_phase": a["peak_phase"],
                       "trace_stage": t["peak_stage"], "analytic_stage": a["peak_stage"],
                       "trace_s": t.get("trace_s"), "trace_method": t.get("trace_method")}
                for p in PARTS:
                    row[f"t_{p}"], row[f"a_{p}"] = t["breakdown_gib"][p], a["breakdown_gib"][p]
                rows.append(row)
                print(_line(row), flush=True)
    if out_csv:
        with open(out_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    _slopes(rows)
    return rows


def _line(r: dict) -> str:
    parts = " ".join(f"{p[:4]} {r[f't_{p}']:.2f}/{r[f'a_{p}']:.2f}" for p in PARTS)
    return (f"{r['model']:>4} s{r['seq']} {r['recompute']:<9} pp{r['pp']} L{r['layers']:<2} trace {r['trace_gib']:7.2f} "
            f"analytic {r['analytic_gib']:7.2f} err {r['error']:+6.1%}  [trace/analytic: {parts}] "
            f"stage {r['trace_stage']}/{r['analytic_stage']} ({r['trace_s']} s)")


def _slopes(rows: list[dict]) -> None:
    """Per-layer slope (between the two deepest rows) and the intercept at zero layers, per method."""
    print("\nper-layer slope and intercept (GiB), trace vs analytic:")
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["seq"], r["recompute"], r["pp"]), []).append(r)
    for key, rs in groups.items():
        rs.sort(key=lambda r: r["layers"])
        (ts, ti), (as_, ai) = (_line_fit(rs[-2], rs[-1], col) for col in ("trace_gib", "analytic_gib"))
        print(f"  {key[0]:>4} s{key[1]} {key[2]:<9} pp{key[3]}: slope {ts:.3f} / {as_:.3f} ({as_ / ts - 1:+.1%}), "
              f"intercept {ti:.3f} / {ai:.3f} ({ai - ti:+.3f} GiB)")


def _line_fit(a: dict, b: dict, col: str) -> tuple[float, float]:
    """(slope per layer, intercept at zero layers) of `col` through two rows."""
    s = (b[col] - a[col]) / (b["layers"] - a["layers"])
    return s, b[col] - s * b["layers"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--models", default="70b,405b")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    rows = run(a.quick, a.models.split(","), a.out)
    worst = min(r["error"] for r in rows)
    print(f"\n{len(rows)} rows; most under-predicted {worst:+.1%}; max |error| {max(abs(r['error']) for r in rows):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
