"""GEMM and attention kernel rates on a real GPU, at the shapes of the GPU harness's training rows: the constants of
the per-operator roofline (calibration/op_efficiency.csv: GEMM efficiency x w / (w + w0), flash attention's
efficiency x `attention_scale`) measured kernel by kernel, which the calibration README's "GEMM efficiency and the
problem's shape" names as what would settle whether the Hopper GEMM efficiency depends on the problem's size.

    python -m gpuwise.validation.kernel_measure --out OUT.csv        # needs CUDA; a minute or two on an H100
    python -m gpuwise.validation.kernel_measure --compare OUT.csv    # measured efficiencies next to the model's
    python -m gpuwise.validation.kernel_measure --device cpu --only gpt2 --scale 64 --out /tmp/k.csv   # harness check

Shapes (`shapes`): every distinct (model, tokens per micro-step, sequence) of `gpu_measure`'s grid and check sets.
Each GEMM row of the model's operator inventory (`op_inventory`: the block's projections and the output layer) runs
its three training GEMMs in bf16 -- forward (M x K @ K x N), input gradient (M x N @ N x K), weight gradient
(K x M @ M x N), M = micro-batch x sequence tokens -- and the attention core runs PyTorch's
scaled_dot_product_attention (causal, the model's query / key-value heads and head dimension) forward and backward.
Seconds are the median of `repeats` timed runs after warm-up (CUDA events on a GPU). FLOPs are counted as the model
counts them (2MNK per GEMM; attention: what the flash kernel executes, `op_inventory`), so a row's measured
efficiency (FLOP/s over the card's dense bf16 peak) compares directly with the model's for the same op.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("device", "torch", "model", "op", "kind", "m", "n", "k", "batch", "heads", "kv_heads", "seq", "head_dim",
          "width", "flops", "seconds", "tflops")


@dataclass(frozen=True)
class Shape:
    """One kernel to time: a GEMM row's three training GEMMs (m tokens, k and n the weight's dimensions) or the
    attention core's forward + backward (batch x seq tokens, heads, kv_heads, head_dim)."""

    model: str
    op: str
    kind: str                # "gemm" | "attention"
    m: int = 0
    n: int = 0
    k: int = 0
    width: int = 0           # the model's GEMM width (smallest weight dimension): w of w / (w + w0)
    batch: int = 0
    heads: int = 0
    kv_heads: int = 0
    seq: int = 0
    head_dim: int = 0

    @property
    def flops(self) -> float:
        """Forward + backward FLOPs as the step model counts them (op_inventory)."""
        if self.kind == "gemm":
            return 3 * 2.0 * self.m * self.n * self.k
        from gpuwise.estimate.op_inventory import BACKWARD, ATTN, attended_keys

        fwd = 4.0 * self.heads * self.head_dim * self.batch * self.seq * attended_keys(self.seq, True)
        return fwd * (1 + BACKWARD[ATTN][0])


def _gemm_dims(b_tok: float, w_params: float) -> tuple[int, int]:
    """(k, n) of a GEMM row from its per-token activation elements (k + n) and weight elements (k x n)."""
    disc = math.sqrt(max(b_tok * b_tok - 4 * w_params, 0.0))
    return round((b_tok - disc) / 2), round((b_tok + disc) / 2)


def model_shapes(spec, micro_batch: int, seq: int) -> list[Shape]:
    """The GEMM rows and the attention core of `spec` at micro_batch x seq tokens (op_inventory's table)."""
    from gpuwise.estimate.op_inventory import ATTN, GEMM, op_table

    tab = op_table(spec)
    out = []
    for i, name in enumerate(tab.names):
        if tab.cls[i] == GEMM:
            k, n = _gemm_dims(tab.b_tok[i], tab.w_params[i])
            out.append(Shape(spec.name, name, "gemm", m=micro_batch * seq, n=n, k=k, width=int(tab.gemm_width[i])))
        elif tab.cls[i] == ATTN:
            hd = spec.head_dim or spec.hidden // spec.n_heads
            out.append(Shape(spec.name, name, "attention", batch=micro_batch, heads=spec.n_heads,
                             kv_heads=spec.n_kv_heads, seq=seq, head_dim=hd, width=hd))
    return out


def shapes(only: tuple[str, ...] = ()) -> list[Shape]:
    """Every distinct kernel of gpu_measure's grid and check rows (the training rows measured on a lent GPU)."""
    from gpuwise.validation.gpu_measure import SETS
    from gpuwise.workload.models import load_model

    seen, out = set(), []
    for entry in SETS["grid"] + SETS["check"]:
        name, micro, seq = entry[:3]
        if only and name not in only:
            continue
        for s in model_shapes(load_model(name), micro, seq):
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def scaled(s: Shape, scale: int) -> Shape:
    """`s` with every dimension divided by `scale` (at least 1; head_dim a multiple of 8): a harness check on a CPU."""
    from dataclasses import replace

    def d(x: int) -> int:
        return max(1, x // scale) if x else 0

    return replace(s, m=d(s.m), n=d(s.n), k=d(s.k), batch=max(1, s.batch) if s.batch else 0, seq=d(s.seq),
                   head_dim=max(8, s.head_dim // scale // 8 * 8) if s.head_dim else 0,
                   heads=s.heads, kv_heads=s.kv_heads)


def _timer(device: str):
    """A function timing a callable (median seconds of `repeats` runs after `warmup`)."""
    import torch

    cuda = device.startswith("cuda")

    def run(fn, warmup: int, repeats: int) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    return run


def _gemm_fn(s: Shape, device: str, dtype):
    import torch

    x = torch.randn(s.m, s.k, device=device, dtype=dtype)
    w = torch.randn(s.k, s.n, device=device, dtype=dtype)
    g = torch.randn(s.m, s.n, device=device, dtype=dtype)

    def fn():
        torch.mm(x, w)            # forward
        torch.mm(g, w.t())        # input gradient
        torch.mm(x.t(), g)        # weight gradient
    return fn


def _attention_fn(s: Shape, device: str, dtype):
    import torch
    import torch.nn.functional as F

    q = torch.randn(s.batch, s.heads, s.seq, s.head_dim, device=device, dtype=dtype, requires_grad=True)
    kv = [torch.randn(s.batch, s.kv_heads, s.seq, s.head_dim, device=device, dtype=dtype, requires_grad=True)
          for _ in range(2)]
    grad = torch.randn(s.batch, s.heads, s.seq, s.head_dim, device=device, dtype=dtype)

    def fn():
        out = F.scaled_dot_product_attention(q, *kv, is_causal=True, enable_gqa=s.kv_heads != s.heads)
        out.backward(grad)
    return fn


def measure(items: list[Shape], device: str = "cuda", warmup: int = 3, repeats: int = 10, on_row=None) -> list[dict]:
    """Time each kernel of `items` on `device` (bf16 on a GPU, fp32 on a CPU); one CSV row each."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    name = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    run, rows = _timer(device), []
    for s in items:
        fn = (_gemm_fn if s.kind == "gemm" else _attention_fn)(s, device, dtype)
        sec = run(fn, warmup, repeats)
        del fn
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        row = {"device": name, "torch": torch.__version__, "model": s.model, "op": s.op, "kind": s.kind, "m": s.m,
               "n": s.n, "k": s.k, "batch": s.batch, "heads": s.heads, "kv_heads": s.kv_heads, "seq": s.seq,
               "head_dim": s.head_dim, "width": s.width, "flops": s.flops, "seconds": sec,
               "tflops": s.flops / sec / 1e12}
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def model_efficiency(row: dict, stack: str = "pytorch") -> tuple[float, float]:
    """(measured, model) efficiency of a measured row: its FLOP/s over the card's dense bf16 peak, and what the step
    model's op_efficiency.csv row for the card's architecture gives the same op (GEMM: gemm x w / (w + w0); attention:
    attention x attention_scale at the row's sequence)."""
    from gpuwise.errors import InputError
    from gpuwise.estimate.roofline_step import attention_scale, op_efficiency_for
    from gpuwise.hardware.gpus import get_gpu, resolve_gpu_name

    name = resolve_gpu_name(row["device"])
    if name is None:
        raise InputError("device", row["device"], "compare rows measured on a GPU that gpuwise's table names")
    gpu = get_gpu(name)
    eff = op_efficiency_for(gpu, stack)
    measured = float(row["tflops"]) / gpu.bf16_tflops
    if row["kind"] == "gemm":
        w = float(row["width"])
        return measured, eff.gemm * w / (w + eff.gemm_w0)
    return measured, eff.attention * attention_scale(float(row["seq"]), True)


def compare(path: Path) -> list[dict]:
    """Every measured row with its measured and modelled efficiency and their ratio."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            measured, model = model_efficiency(r)
            out.append({**r, "measured_eff": measured, "model_eff": model, "ratio": measured / model})
    return out


def _print_compare(rows: list[dict]) -> None:
    print(f"{'model':14} {'op':15} {'m':>6} {'n':>6} {'k':>6} {'seq':>6} {'TFLOP/s':>8} {'measured':>8} "
          f"{'model':>6} {'ratio':>6}")
    for r in rows:
        print(f"{r['model'][:14]:14} {r['op'][:15]:15} {r['m']:>6} {r['n']:>6} {r['k']:>6} {r['seq']:>6} "
              f"{float(r['tflops']):8.1f} {r['measured_eff']:8.1%} {r['model_eff']:6.1%} {r['ratio']:6.2f}")
    for kind in ("gemm", "attention"):
        ratios = [r["ratio"] for r in rows if r["kind"] == kind]
        if ratios:
            print(f"{kind}: {len(ratios)} kernels, measured / model efficiency median {statistics.median(ratios):.2f} "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.kernel_measure", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="CSV to write the measured rows to")
    ap.add_argument("--compare", type=Path, help="a measured CSV: print measured vs modelled efficiency")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", nargs="*", default=[], help="models to measure (default: all of the grid and check)")
    ap.add_argument("--scale", type=int, default=1, help="divide every dimension (a harness check on a CPU)")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    if args.compare:
        from gpuwise.errors import InputError

        try:
            _print_compare(compare(args.compare))
        except (InputError, OSError, KeyError, ValueError) as e:
            print(f"kernel_measure: --compare {args.compare}: {e}", file=sys.stderr)
            return 2
        return 0
    if not args.out:
        print("kernel_measure: --out: give a CSV path to write (or --compare CSV); nothing measured", file=sys.stderr)
        return 2
    items = [scaled(s, args.scale) if args.scale > 1 else s for s in shapes(tuple(args.only))]
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()

        def on_row(row: dict) -> None:
            w.writerow(row)
            f.flush()
            print(f"{row['model']} {row['op']} {row['tflops']:.1f} TFLOP/s", flush=True)

        measure(items, args.device, repeats=args.repeats, on_row=on_row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
