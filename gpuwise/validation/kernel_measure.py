"""GEMM and attention kernel rates on a real GPU, at the shapes of the GPU harness's training rows: the constants of
the per-operator roofline (calibration/op_efficiency.csv: GEMM efficiency x w / (w + w0), flash attention's
efficiency x `attention_scale`) measured kernel by kernel, which the calibration README's "GEMM efficiency and the
problem's shape" names as what would settle whether the Hopper GEMM efficiency depends on the problem's size.

    python -m gpuwise.validation.kernel_measure --out OUT.csv        # needs CUDA; a minute or two on an H100
    python -m gpuwise.validation.kernel_measure --compare OUT.csv    # measured efficiencies next to the model's
    python -m gpuwise.validation.kernel_measure --device cpu --only gpt2 --scale 64 --out /tmp/k.csv   # harness check

Shapes (`shapes`): every distinct (model, tokens per micro-step, sequence) of `gpu_measure`'s grid and check sets, with
the projections the harness's models really run (gpuwise.nn, one block built on the meta device: fused or separate
q/k/v and gate/up by family) and the output layer. Each linear layer (weight n x k) runs its three training GEMMs in
bf16 as nn.Linear does -- forward x @ W^T (M x k), input gradient g @ W (M x n), weight gradient g^T @ x --, M =
micro-batch x sequence tokens; the attention core runs PyTorch's scaled_dot_product_attention (causal, the model's
query / key-value heads and head dimension) forward and backward. Seconds are the median of `repeats` timed runs
after warm-up (CUDA events on a GPU). FLOPs are counted as the step model counts them (2Mnk per GEMM; attention:
what the flash kernel executes, `op_inventory`), so a row's efficiency (FLOP/s over the card's dense bf16 peak)
compares with the model's for the same op: `roofline_step.gemm_efficiency` at the layer's smallest dimension (the
model applies it per fused op), `roofline_step.attention_efficiency` at the row's sequence.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("device", "torch", "model", "op", "kind", "m", "n", "k", "batch", "heads", "kv_heads", "seq", "head_dim",
          "width", "flops", "status", "seconds", "tflops")


@dataclass(frozen=True)
class Shape:
    """One kernel to time: a linear layer's three training GEMMs (m tokens, weight n x k: k inputs, n outputs) or
    the attention core's forward + backward (batch x seq tokens, heads, kv_heads, head_dim)."""

    model: str
    op: str
    kind: str                # "gemm" | "attention"
    m: int = 0
    n: int = 0
    k: int = 0
    width: int = 0           # the smallest weight dimension (w of w / (w + w0)); attention: head_dim
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


def model_shapes(spec, micro_batch: int, seq: int) -> list[Shape]:
    """The linear layers of one block and the output layer of `spec` as gpuwise.nn builds them, and its attention
    core, at micro_batch x seq tokens."""
    import torch

    from gpuwise.nn import build_model

    model = build_model(spec, dtype=torch.bfloat16, layers=1, device="meta")
    m = micro_batch * seq
    out = [Shape(spec.name, name.rsplit(".", 1)[-1], "gemm", m=m, n=mod.out_features, k=mod.in_features,
                 width=min(mod.in_features, mod.out_features))
           for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)]
    if not any(s.op == "head" for s in out):             # tied embeddings: the head reads the embedding matrix
        out.append(Shape(spec.name, "head", "gemm", m=m, n=spec.vocab_size, k=spec.hidden,
                         width=min(spec.hidden, spec.vocab_size)))
    hd = spec.head_dim or spec.hidden // spec.n_heads
    out.insert(0, Shape(spec.name, "attention", "attention", batch=micro_batch, heads=spec.n_heads,
                        kv_heads=spec.n_kv_heads, seq=seq, head_dim=hd, width=hd))
    return out


def shapes(only: tuple[str, ...] = ()) -> list[Shape]:
    """Every distinct kernel of gpu_measure's grid and check rows (the training rows measured on a lent GPU)."""
    from gpuwise.errors import InputError
    from gpuwise.validation.gpu_measure import SETS
    from gpuwise.workload.models import load_model

    rows = SETS["grid"] + SETS["check"]
    unknown = sorted(set(only) - {e[0] for e in rows})
    if unknown:
        raise InputError("only", " ".join(unknown), "name models of the grid or check set: "
                         + ", ".join(sorted({e[0] for e in rows})))
    seen, out = set(), []
    for name, micro, seq, *_ in rows:
        if only and name not in only:
            continue
        for s in model_shapes(load_model(name), micro, seq):
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


def scaled(s: Shape, scale: int) -> Shape:
    """`s` with its tokens and matrix dimensions divided by `scale` (at least 1; head_dim a multiple of 8; batch and
    head counts kept): a harness check on a CPU."""
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
    import torch.nn.functional as F

    x = torch.randn(s.m, s.k, device=device, dtype=dtype)
    w = torch.randn(s.n, s.k, device=device, dtype=dtype)
    g = torch.randn(s.m, s.n, device=device, dtype=dtype)

    def fn():
        F.linear(x, w)            # forward
        torch.mm(g, w)            # input gradient
        torch.mm(g.t(), x)        # weight gradient
    return fn


def _attention_fn(s: Shape, device: str, dtype):
    import torch
    import torch.nn.functional as F

    q = torch.randn(s.batch, s.heads, s.seq, s.head_dim, device=device, dtype=dtype, requires_grad=True)
    kv = [torch.randn(s.batch, s.kv_heads, s.seq, s.head_dim, device=device, dtype=dtype, requires_grad=True)
          for _ in range(2)]
    grad = torch.randn(s.batch, s.heads, s.seq, s.head_dim, device=device, dtype=dtype)

    def fn():                    # gradients returned, not accumulated into .grad (no extra passes timed)
        out = F.scaled_dot_product_attention(q, *kv, is_causal=True, enable_gqa=s.kv_heads != s.heads)
        torch.autograd.grad(out, (q, *kv), grad)
    return fn


def measure(items: list[Shape], device: str = "cuda", warmup: int = 3, repeats: int = 10, on_row=None) -> list[dict]:
    """Time each kernel of `items` on `device` (bf16 on a GPU, fp32 on a CPU); one CSV row each (status oom: the
    kernel's tensors did not fit, the rest still run)."""
    import torch

    cuda = device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    run, rows = _timer(device), []
    for s in items:
        row = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
               **{f: getattr(s, f) for f in FIELDS[2:14]}, "flops": s.flops}
        try:
            sec = run((_gemm_fn if s.kind == "gemm" else _attention_fn)(s, device, dtype), warmup, repeats)
            row |= {"status": "ok", "seconds": sec, "tflops": s.flops / sec / 1e12}
        except torch.OutOfMemoryError:
            row |= {"status": "oom", "seconds": "", "tflops": ""}
        if cuda:
            torch.cuda.empty_cache()
        rows.append(row)
        if on_row:
            on_row(row)
    return rows


def model_efficiency(row: dict, stack: str = "pytorch") -> tuple[float, float]:
    """(measured, model) efficiency of a measured row: its FLOP/s over the card's dense bf16 peak, and what the step
    model's op_efficiency.csv row for the card's architecture gives the same op."""
    from gpuwise.errors import InputError
    from gpuwise.estimate.roofline_step import attention_efficiency, gemm_efficiency, op_efficiency_for
    from gpuwise.hardware.gpus import get_gpu, resolve_gpu_name

    name = resolve_gpu_name(row["device"])
    if name is None or not get_gpu(name).bf16_tflops:
        raise InputError("device", row["device"], "compare rows measured on a GPU with a bf16 peak in gpuwise's table")
    gpu = get_gpu(name)
    eff = op_efficiency_for(gpu, stack)
    measured = float(row["tflops"]) / gpu.bf16_tflops
    if row["kind"] == "gemm":
        return measured, float(gemm_efficiency(eff, float(row["width"])))
    return measured, attention_efficiency(eff, float(row["seq"]), True)


def compare(path: Path) -> list[dict]:
    """Every measured row with its measured and modelled efficiency and their ratio."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r.get("status", "ok") != "ok":
                continue
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
    import torch

    from gpuwise.errors import InputError

    try:
        items = [scaled(s, args.scale) if args.scale > 1 else s for s in shapes(tuple(args.only))]
    except InputError as e:
        print(f"kernel_measure: {e}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"kernel_measure: --device {args.device}: no CUDA device here; use --device cpu for a harness check",
              file=sys.stderr)
        return 2
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()

        def on_row(row: dict) -> None:
            w.writerow(row)
            f.flush()
            rate = f"{row['tflops']:.1f} TFLOP/s" if row["status"] == "ok" else row["status"]
            print(f"{row['model']} {row['op']} {rate}", flush=True)

        measure(items, args.device, repeats=args.repeats, on_row=on_row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
