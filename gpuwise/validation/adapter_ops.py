"""Count the bytes and kernels a LoRA adapter adds to its frozen linear (calibration/adapter_traffic.csv).

Run: python -m gpuwise.validation.adapter_ops [--write]

Every key of `estimate.adapter_traffic` that some stack produces (each stack x precision x 16-bit / 4-bit base x
dropout 0 / 0.05) builds gpuwise.nn's LoRA layer with the dtypes the trace gives it (trace.run.adapters_for,
trace.precision.dtypes, trace.run.stream_dtype) and runs it forward and backward on CPU under a dispatch mode that adds
up the bytes of every op's tensor inputs and outputs (views move none) and counts the ops. The frozen linear alone
(`LoRALinear.frozen`) is counted the same way and subtracted. Bytes per token come from two token counts, and the
coefficients per input dimension, output dimension and unit of rank from the shapes; what is left at a token count
(the adapters' weights and gradients, DoRA's weight norms) is solved per in^2, in x out, in x rank, out x rank, in, out
and a constant (the 4-bit base's second-level constants at these small shapes; exact solves: the counts are linear in
each). Nothing is timed or fitted: the step time divides these bytes by
the card's bandwidth (estimate.roofline_step.lora_adapter_s)."""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from gpuwise.data import data_path
from gpuwise.estimate.adapter_traffic import FIXED_TERMS, KEY_COLUMNS, TRAFFIC_CSV, VALUE_COLUMNS, adapter_key

SHAPES = ((64, 64, 4), (128, 64, 4), (64, 128, 4), (64, 64, 8), (128, 128, 8), (192, 64, 4), (64, 192, 8),
          (96, 96, 4))   # (d_in, d_out, rank)
TOKENS = (64, 128)
PRECISIONS = ("fp32", "bf16", "bf16-mixed")      # one per precision class (fp16 moves the same bytes)
DROPOUTS = (0.0, 0.05)


def byte_counter():
    """A TorchDispatchMode adding up the bytes of each op's tensor inputs and outputs (``.bytes``) and counting the
    ops (``.kernels``); ops whose outputs all alias an input without writing it (views) move nothing and count none,
    nor do allocations that write nothing (empty)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.bytes, self.kernels = 0, 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            writes = any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)
            stores = {t.untyped_storage().data_ptr() for t in ins}
            if (not writes and outs and all(t.untyped_storage().data_ptr() in stores for t in outs)) \
                    or "empty" in func.__name__:
                return out
            self.bytes += nbytes(ins) + nbytes(outs)
            self.kernels += 1
            return out

    return Count()


def _counts(fn, params, x_dtype, tokens: int, d_in: int) -> tuple[int, int, int, int]:
    """(forward bytes, backward bytes, forward ops, backward ops) of ``fn`` (a layer, or its frozen linear alone) on
    `tokens` inputs; `params`: the module whose gradients each count makes anew."""
    import torch

    params.zero_grad(set_to_none=True)
    x = torch.randn(tokens, d_in, dtype=x_dtype, requires_grad=True)
    fwd, bwd = byte_counter(), byte_counter()
    with fwd:
        y = fn(x)
    g = torch.randn_like(y)
    with bwd:
        y.backward(g)
    return fwd.bytes, bwd.bytes, fwd.kernels, bwd.kernels


def _solve(pairs, x_dtype) -> dict[str, float]:
    """Coefficients (VALUE_COLUMNS) from ``pairs``: per SHAPES entry, (module, with-adapter fn, frozen-alone fn)."""
    per_token, first, kernels = [], [], set()
    for (d_in, _, _), (module, run, alone) in zip(SHAPES, pairs):
        delta = []
        for tokens in TOKENS:
            with_a, base = (_counts(f, module, x_dtype, tokens, d_in) for f in (run, alone))
            delta.append([w - a for w, a in zip(with_a, base)])
        per_token.append([(delta[1][i] - delta[0][i]) / (TOKENS[1] - TOKENS[0]) for i in (0, 1)])
        first.append(delta[0][:2])
        kernels |= {tuple(d[2:]) for d in delta}
    shapes = np.array(SHAPES, dtype=float)
    coef, *_ = np.linalg.lstsq(shapes, np.array(per_token), rcond=None)
    # the counts are linear in d_in, d_out and rank with no constant, and the ops the same at every shape and length
    assert np.allclose(shapes @ coef, per_token) and len(kernels) == 1, (per_token, kernels)
    # what a call moves whatever its tokens: the first token count's bytes less its tokens' share
    fixed = np.array(first) - TOKENS[0] * np.array(per_token)
    d_in, d_out, rank = shapes.T
    basis = np.stack([d_in * d_in, d_in * d_out, d_in * rank, d_out * rank, d_in, d_out, np.ones_like(d_in)], axis=1)
    fix, *_ = np.linalg.lstsq(basis, fixed, rcond=None)
    assert np.allclose(basis @ fix, fixed), fixed
    (fk, bk), = kernels
    row = {"fwd_in": coef[0, 0], "fwd_out": coef[1, 0], "fwd_rank": coef[2, 0],
           "bwd_in": coef[0, 1], "bwd_out": coef[1, 1], "bwd_rank": coef[2, 1], "fwd_kernels": fk, "bwd_kernels": bk}
    row |= {f"fwd_fix_{t}": fix[i, 0] for i, t in enumerate(FIXED_TERMS)}
    row |= {f"bwd_fix_{t}": fix[i, 1] for i, t in enumerate(FIXED_TERMS)}
    return {k: round(float(v), 3) + 0.0 for k, v in row.items()}      # + 0.0: no "-0" in the table


def _layer(cfg, d_in: int, d_out: int, rank: int):
    """gpuwise.nn's LoRA layer as the trace builds it for ``cfg`` (dtypes, PEFT's casts, dropout) and its input dtype."""
    from gpuwise.nn import set_compute_dtype
    from gpuwise.nn.layers import make_linear
    from gpuwise.trace.precision import dtypes
    from gpuwise.trace.run import adapters_for, stream_dtype

    dt = dtypes(cfg.precision, False)
    layer = make_linear(d_in, d_out, False, adapters_for(replace(cfg, lora_rank=rank), dt, frozenset({"q"})), True)
    set_compute_dtype(layer, dt.compute)
    layer.train()
    return layer, stream_dtype(cfg, dt)


def count_row(cfg) -> dict[str, float]:
    """The counted coefficients (VALUE_COLUMNS) of ``cfg``'s adapters."""
    import torch

    torch.manual_seed(0)
    pairs, x_dtype = [], None
    for d_in, d_out, rank in SHAPES:
        layer, x_dtype = _layer(cfg, d_in, d_out, rank)
        pairs.append((layer, layer, layer.frozen))
    return _solve(pairs, x_dtype)


def peft_rows() -> list[dict]:
    """The same count on PEFT's own lora.Linear (peft installed; not a gpuwise dependency), float32 adapters as
    get_peft_model leaves them, no dropout (on CPU dropout is bernoulli + div + mul, on CUDA the fused native_dropout
    the reference layer calls): pure bf16 and bf16 autocast, LoRA and DoRA (use_dora: a 16-bit frozen base, which
    DoRA's weight norm casts), beside the stored rows of the same keys."""
    import torch
    from peft.tuners.lora.layer import Linear as PeftLinear

    out = []
    for autocast, dora in ((False, False), (True, False), (False, True), (True, True)):
        pairs = []
        for d_in, d_out, rank in SHAPES:
            base = torch.nn.Linear(d_in, d_out, bias=False,
                                   dtype=torch.float32 if autocast and not dora else torch.bfloat16)
            base.weight.requires_grad_(False)
            m = PeftLinear(base, "default", r=rank, lora_alpha=2 * rank, lora_dropout=0.0, use_dora=dora)
            m.lora_A.float(), m.lora_B.float()
            if dora:
                m.lora_magnitude_vector.float()
            m.train()

            def under(fn, on=autocast):
                def run(x):
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=on):
                        return fn(x)
                return run
            pairs.append((m, under(m), under(m.base_layer)))
        key = {"peft": "yes", "dropout": "no", "precision": "autocast" if autocast else "pure16", "nf4": "no",
               "fp32_stream": "no", "dora": "reuse" if dora else "no"}
        out.append(key | _solve(pairs, torch.bfloat16))
    return out


def _configs():
    """One LoRA configuration per stack x precision class x ZeRO 0 / 1 x base x dropout (deduplicated by key)."""
    from gpuwise.workload.stacks import stack_names, stack_row
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    seen = {}
    for stack in stack_names():
        for precision in PRECISIONS:
            for zero in (0, 1):
                for quantize in (None, "nf4"):
                    for dropout in DROPOUTS:
                        for dora in (False, True) if stack_row(stack).dora != "no" else (False,):
                            cfg = TrainingConfig(micro_batch=1, seq_len=64, precision=precision, stack=stack,
                                                 lora_rank=8, lora_targets="q", quantize=quantize, lora_dropout=dropout,
                                                 plan=ParallelPlan(dp=2, zero=zero), dora=dora)
                            seen.setdefault(adapter_key(cfg), cfg)
    return seen


def rows() -> list[dict]:
    """The counted rows; a key whose layer the reference cannot run (a float32 stream into 16-bit adapters) is left
    out (estimate.adapter_traffic.counted_key says what stands in)."""
    out = []
    for key, cfg in sorted(_configs().items(), key=lambda kv: str(kv[0])):
        try:
            counted = count_row(cfg)
        except RuntimeError as err:   # a float32 stream into 16-bit adapters: "... m1 and m2 to have the same dtype"
            if "dtype" not in str(err):
                raise
            continue
        flags = ["yes" if v is True else "no" if v is False else v for v in key]      # dora stays no / reuse / rerun
        out.append(dict(zip(KEY_COLUMNS, flags)) | counted)
    return out


HEADER = """# Bytes and kernels an unmerged LoRA adapter adds to its frozen linear, COUNTED (not fitted, not timed) on
# gpuwise.nn's LoRA layer by `python -m gpuwise.validation.adapter_ops --write` (torch {torch}). Per token: fwd_in /
# bwd_in bytes per input dimension, fwd_out / bwd_out per output dimension, fwd_rank / bwd_rank per unit of rank,
# forward / backward; fwd_kernels / bwd_kernels ops per forward / backward; fwd_fix_* / bwd_fix_* bytes per call
# whatever its tokens, per in^2, in x out, in x rank, out x rank, in, out and 1 (the adapters' weights and gradients,
# DoRA's weight norms). Keys: estimate/adapter_traffic.py.
# Each op's tensor inputs and outputs are counted once (a view moves nothing); caches and fusion are not modelled."""


def write() -> str:
    import torch

    path = data_path(*TRAFFIC_CSV)
    lines = [HEADER.format(torch=torch.__version__), ",".join(KEY_COLUMNS + VALUE_COLUMNS)]
    for r in rows():
        lines.append(",".join(f"{r[c]:g}" if isinstance(r[c], float) else str(r[c]) for c in KEY_COLUMNS + VALUE_COLUMNS))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _against_peft() -> int:
    from importlib.util import find_spec

    from gpuwise.estimate.adapter_traffic import key_of, table

    if find_spec("peft") is None:
        print("peft is not installed: pip install peft (only this check uses it)")
        return 1
    same = True
    for r in peft_rows():
        key = key_of(r)
        stored = table()[key].columns()
        same = same and all(r[c] == stored[c] for c in VALUE_COLUMNS)
        print(f"{r['precision']:8s} {'LoRA' if r['dora'] == 'no' else 'DoRA'} peft:   "
              + ", ".join(f"{c}={r[c]:g}" for c in VALUE_COLUMNS))
        print(f"{'':13s} stored: " + ", ".join(f"{c}={stored[c]:g}" for c in VALUE_COLUMNS))
    print("PEFT's layer moves the stored bytes and kernels" if same else "PEFT's layer DIFFERS from the stored rows")
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.adapter_ops", description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite calibration/adapter_traffic.csv")
    ap.add_argument("--against-peft", action="store_true",
                    help="count PEFT's own LoRA layer too (needs peft installed) and print it beside the stored rows")
    args = ap.parse_args(argv)
    if args.against_peft:
        return _against_peft()
    if args.write:
        print("wrote", write())
        return 0
    for r in rows():
        print(", ".join(f"{k}={v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
