"""Measured peak memory and step time of real training steps on this machine's GPU, next to what the
analytic model predicts for the same configuration (issue 11: validation data that is independent of
the formulas).

Each configuration is built from its config with random weights (``gpuwise.nn``, the same modules the
trace uses, with the trace's precision, recompute and optimizer semantics), trained for a few steps on
one GPU, and measured on the last one: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``
after a warm-up (the optimizer state exists, as in the model's steady step) and the wall time of each
step between ``torch.cuda.synchronize`` calls. One GPU, so dp = tp = pp = cp = 1 and no NCCL.

    python -m gpuwise.validation.gpu_measure --out gpuwise/data/measured/gpu/gpu_runs.csv   # needs CUDA
    python -m gpuwise.validation.gpu_measure --device cpu --only gpt2 --layers 1 --seq-len 32 \
        --precision fp32 --out /tmp/runs.csv                                            # harness check

Rows are appended (a row per configuration, with the GPU's name and the torch version); configurations
already measured (or out of memory) in the file for this device are skipped, so a grid resumes and runs on
other GPUs add to it; an ``error`` row is measured again. ``--set check`` measures the held-out set instead
of the grid; ``--only`` picks models. A configuration that runs out of memory is a row too (status ``oom``:
the model predicted it to fit). The optimizer step is foreach AdamW (what ``torch.optim.AdamW`` is on CUDA),
stated to the model as the optimizer_impl lever. Between rows the harness frees everything and refuses a row
that starts with memory still allocated (an earlier row's leak would count in its peak). What one H200 gave:
docs/gpu-runs.md. Needs ``pip install 'gpuwise[trace]'``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
import time
from pathlib import Path

from gpuwise.workload.training import TrainingConfig

# (model, micro-batch, sequence, precision, recompute, LoRA rank, quantize, levers) that fit one 80 GB GPU:
# small models in full, 7B-class models under LoRA / QLoRA, every recompute policy on one model
BASE: tuple[tuple, ...] = (
    ("gpt2", 8, 1024, "bf16-mixed", "none", 0, None, ""),
    ("gpt2-xl", 4, 1024, "bf16-mixed", "none", 0, None, ""),
    ("mpt-125m", 16, 2048, "bf16-mixed", "none", 0, None, ""),
    ("mpt-350m", 8, 2048, "bf16-mixed", "none", 0, None, ""),
    ("mpt-760m", 4, 2048, "bf16-mixed", "none", 0, None, ""),
    ("mpt-1b", 4, 2048, "bf16-mixed", "none", 0, None, ""),
    ("phi-1.5", 4, 2048, "bf16-mixed", "none", 0, None, ""),
    ("gemma-2b", 2, 2048, "bf16-mixed", "full", 0, None, ""),
    ("mpt-1b", 8, 2048, "bf16-mixed", "full", 0, None, ""),
    ("mpt-1b", 8, 2048, "bf16-mixed", "op", 0, None, ""),
    ("mpt-1b", 8, 2048, "bf16-mixed", "layer-2", 0, None, ""),
    ("mpt-1b", 8, 2048, "bf16-mixed", "selective", 0, None, ""),
    ("mpt-1b", 4, 2048, "fp32", "none", 0, None, ""),
    ("llama-2-7b", 2, 2048, "bf16-mixed", "none", 16, None, ""),
    ("llama-3.1-8b", 1, 4096, "bf16-mixed", "full", 16, None, ""),
    ("mistral-7b", 2, 2048, "bf16-mixed", "none", 16, "nf4", ""),
)
# the levers of issue 21, each against a BASE row with the lever off: the loss kernel, the optimizer
# stepped in backward, saved activations on the host, torch.compile of each block, LoRA targets
LEVERS: tuple[tuple, ...] = (
    ("mpt-1b", 8, 2048, "bf16-mixed", "full", 0, None, "loss_kernel=chunked"),
    ("gemma-2b", 2, 2048, "bf16-mixed", "full", 0, None, "loss_kernel=chunked"),
    ("mpt-1b", 4, 2048, "bf16-mixed", "none", 0, None, "optimizer_in_backward=1"),
    ("mpt-1b", 4, 2048, "bf16-mixed", "none", 0, None, "activation_offload=1"),
    ("mpt-1b", 4, 2048, "bf16-mixed", "none", 0, None, "compile=1"),
    ("llama-2-7b", 2, 2048, "bf16-mixed", "none", 16, None, "lora_targets=all-linear"),
    ("gemma-2b", 2, 2048, "bf16-mixed", "full", 0, None, "optimizer_impl=fused"),
)
# long sequences (32k-64k), where the step-time model had no measured row
LONG: tuple[tuple, ...] = (
    ("qwen2.5-0.5b", 1, 16384, "bf16-mixed", "none", 0, None, ""),
    ("qwen2.5-0.5b", 1, 32768, "bf16-mixed", "full", 0, None, ""),
    ("llama-3.2-1b", 1, 32768, "bf16-mixed", "full", 0, None, ""),
    ("llama-3.2-1b", 1, 65536, "bf16-mixed", "full", 0, None, "loss_kernel=chunked"),
    ("llama-3.1-8b", 1, 32768, "bf16-mixed", "full", 16, None, ""),
)
GRID: tuple[tuple, ...] = BASE + LEVERS + LONG
# held out: chosen before any constant was changed after the first H200 run of GRID, measured in a later
# run and never used to fit or diagnose (docs/gpu-runs.md); the same levers and lengths on other models
CHECK: tuple[tuple, ...] = (
    ("llama-3.2-1b", 2, 8192, "bf16-mixed", "full", 0, None, ""),
    ("llama-3.2-1b", 1, 16384, "bf16-mixed", "none", 0, None, ""),
    ("qwen2.5-0.5b", 2, 8192, "bf16-mixed", "full", 0, None, "loss_kernel=chunked"),
    ("llama-3.1-8b", 1, 16384, "bf16-mixed", "full", 16, None, ""),
    ("llama-3.1-8b", 1, 4096, "bf16-mixed", "full", 16, None, "lora_targets=all-linear"),
    ("mistral-7b", 1, 8192, "bf16-mixed", "full", 16, None, "lora_targets=all-linear"),
    ("gpt2-xl", 4, 1024, "bf16-mixed", "none", 0, None, "compile=1"),
    ("mpt-350m", 8, 2048, "bf16-mixed", "none", 0, None, "compile=1"),
    ("llama-3.2-1b", 2, 4096, "bf16-mixed", "none", 0, None, "activation_offload=1"),
    ("gemma-7b", 1, 4096, "bf16-mixed", "full", 16, None, ""),
    ("phi-1.5", 8, 2048, "bf16-mixed", "full", 0, None, "loss_kernel=chunked"),
    ("qwen2.5-7b", 1, 8192, "bf16-mixed", "full", 16, "nf4", ""),
    ("phi-1.5", 4, 2048, "bf16-mixed", "full", 0, None, "optimizer_impl=fused"),
)
# not yet measured (no GPU since they were written): steps whose micro-batches are drawn at varying lengths (the
# allocator simulation's --lengths, same seeded draws: `lengths_of`) and two micro-batches per step, the parts of
# `gpuwise.trace.reserved` that no measured run has checked; each row trains VARYING_STEPS steps
VARYING: tuple[tuple, ...] = (
    ("gpt2", 8, 1024, "bf16-mixed", "none", 0, None, "lengths=uniform:32"),
    ("qwen2.5-0.5b", 4, 2048, "bf16-mixed", "full", 0, None, "lengths=lognormal:800:600"),
    ("llama-3.2-1b", 2, 4096, "bf16-mixed", "full", 0, None, "lengths=lognormal:1500:1200:drop"),
    ("llama-3.1-8b", 1, 4096, "bf16-mixed", "full", 16, None, "lengths=lognormal:1500:1200"),
    ("mpt-1b", 4, 2048, "bf16-mixed", "none", 0, None, "grad_accum=2"),
    ("qwen2.5-0.5b", 4, 2048, "bf16-mixed", "full", 0, None, "grad_accum=2;lengths=uniform:64"),
)
# not yet measured (written 2026-11-27): the adapters' counted traffic (calibration/adapter_traffic.csv) and the
# padding mask's kernel, whose rate the step-time model only assumes: the same llama-3.2-1b step as plain adapters,
# PEFT's float32 layers (stack hf-trainer) with and without dropout, a full fine-tune, and with a padding mask (PyTorch's
# memory-efficient kernel over every tile; under autocast each layer's 16-bit cast of the float32 mask), and DoRA (PEFT's
# layer, its weight norms each forward; torchtune's in pure bf16)
ADAPTERS: tuple[tuple, ...] = (
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 0, None, ""),
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 16, None, "lora_targets=all-linear"),
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 16, None, "lora_targets=all-linear;stack=hf-trainer"),
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 16, None, "lora_targets=all-linear;stack=hf-trainer;lora_dropout=0.05"),
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 16, None, "lora_targets=all-linear;padding_mask=1"),
    ("llama-3.2-1b", 2, 4096, "bf16-mixed", "none", 0, None, "padding_mask=1"),
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 16, None, "lora_targets=all-linear;stack=hf-trainer;dora=1"),
    ("llama-3.2-1b", 2, 4096, "bf16", "full", 16, None, "lora_targets=all-linear;stack=torchtune;dora=1"),
)
VARYING_STEPS = 200       # = gpuwise.trace.reserved.DEFAULT_STEPS (a test holds them equal): the replay's steps
SETS = {"grid": GRID, "check": CHECK, "varying": VARYING, "adapters": ADAPTERS}
KEY = ("device", "model", "layers", "micro_batch", "seq_len", "precision", "recompute", "lora_rank", "quantize",
       "levers")
COLUMNS = ("status", "device", "torch", "model", "layers", "micro_batch", "seq_len", "precision", "recompute",
           "lora_rank", "quantize", "levers", "optimizer", "measured_allocated_gib", "measured_reserved_gib",
           "predicted_allocated_gib", "predicted_reserved_gib", "measured_step_s", "measured_tokens_per_s",
           "predicted_tokens_per_s", "note")
GIB = 2 ** 30
LEAK_BYTES = 2 ** 28   # allocated before a row beyond this (256 MiB) is an earlier row's leak


@dataclasses.dataclass(frozen=True)
class Measured:
    allocated: float | None        # bytes, max_memory_allocated of the measured step (None off CUDA)
    reserved: float | None         # bytes, max_memory_reserved
    step_s: float                  # median wall seconds of the timed steps


def levers_of(levers: str) -> dict:
    """A grid entry's levers, "loss_kernel=chunked;compile=1;grad_accum=2", as TrainingConfig fields (`lengths`,
    not a field, is `lengths_of`'s)."""
    out: dict = {}
    for k, v in _lever_items(levers).items():
        if k != "lengths":
            out[k] = (v == "1" if k in ("optimizer_in_backward", "activation_offload", "compile", "padding_mask", "dora")
                      else int(v) if k == "grad_accum" else float(v) if k == "lora_dropout" else v)
    return out


def _lever_items(levers: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in filter(None, levers.split(";")))


def lengths_of(levers: str, seq: int):
    """A grid entry's `lengths=...` lever as a gpuwise.trace.reserved.LengthDist (None: every micro-batch `seq`)."""
    from gpuwise.trace.reserved import parse_lengths

    text = _lever_items(levers).get("lengths")
    return parse_lengths(text, seq) if text else None


# the harness's optimizer step: torch.optim.AdamW as a plain PyTorch loop gets it on CUDA (foreach), stated
# in every prediction as the optimizer_impl lever (the pytorch stack's own default is the fused kernel)
OPTIMIZER_IMPL = "foreach"


def config(micro: int, seq: int, precision: str, recompute: str, lora: int, quantize: str | None,
           levers: str = "", optimizer: str = "adamw") -> TrainingConfig:
    fields = {"optimizer_impl": OPTIMIZER_IMPL, **levers_of(levers)}
    return TrainingConfig(micro_batch=micro, seq_len=seq, precision=precision, recompute=recompute,
                          lora_rank=lora, quantize=quantize, optimizer=optimizer, **fields)


def build(spec, cfg: TrainingConfig, device: str):
    """The model, optimizers and optimizer-in-backward hook handles as the trace builds them (`trace.run`),
    on a real device; compiled per block under ``cfg.compile`` (what the step-time model assumes). Remove
    the hooks when done: they keep the model alive otherwise (`trace.run.step_in_backward`)."""
    import torch

    from gpuwise.trace.precision import dtypes
    from gpuwise.trace.run import build_rank_model, optimizers, step_in_backward

    model = build_rank_model(spec, cfg, dtypes(cfg.precision, False), device=device)
    if cfg.compile:
        for mod in list(model.modules()):
            blocks = getattr(mod, "blocks", None)
            if isinstance(blocks, torch.nn.ModuleList):
                for i, block in enumerate(blocks):
                    blocks[i] = torch.compile(block)
    from gpuwise.estimate.levers import resolve

    opts = optimizers(cfg, model, foreach=resolve(cfg).optimizer_impl == "foreach")
    return model, opts, step_in_backward(model, opts, cfg.optimizer_in_backward)


def train_step(model, opts: list, cfg: TrainingConfig, ids) -> None:
    """One training step on the batch ``ids`` (labels = inputs): the loop the allocator simulation replays
    (`gpuwise.trace.step.train_step`), one micro-batch."""
    from gpuwise.trace.step import train_step as step

    step(model, opts, cfg, [ids])


def measure(spec, cfg: TrainingConfig, device: str = "cuda", steps: int = 4, lengths=None) -> Measured:
    """Train `steps` steps of random tokens; peak memory of the last, median time of all but the first. With
    `lengths` (a LengthDist) or gradient accumulation each step runs min(grad_accum, 2) micro-batches drawn as the
    allocator simulation draws them (seed 0), and the peaks are the whole run's (so is the simulated reserve)."""
    import torch

    from gpuwise.trace.reserved import LengthDist
    from gpuwise.trace.step import train_step as step

    cuda = device.startswith("cuda")
    drawn = lengths is not None or cfg.grad_accum > 1
    draw = (lengths or LengthDist("fixed", cfg.seq_len)).sampler(0)
    if cuda:
        _fresh(device)
        if drawn:                                  # the whole run's peaks, build included, as the replay's
            torch.cuda.reset_peak_memory_stats()
    model, opts, hooks = build(spec, cfg, device)
    times = []
    for i in range(steps):
        batches = [torch.randint(0, spec.vocab_size, (cfg.micro_batch, draw()), device=device)
                   for _ in range(min(cfg.grad_accum, 2) if drawn else 1)]
        if cuda:
            torch.cuda.synchronize()
            if not drawn and i == steps - 1:       # else the last step's peaks
                torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        step(model, opts, cfg, batches)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del batches
    alloc = float(torch.cuda.max_memory_allocated()) if cuda else None
    reserved = float(torch.cuda.max_memory_reserved()) if cuda else None
    del model, opts
    release(hooks)
    return Measured(alloc, reserved, statistics.median(times[1:] or times))


def _fresh(device: str) -> None:
    """Make `device` current (the statistics read the current device; "cuda": 0), free what earlier rows left, and
    refuse a row that starts with memory still allocated (an earlier row's leak would count in its peak)."""
    import torch

    torch.cuda.set_device(torch.device(device).index or 0)
    release()
    left = torch.cuda.memory_allocated()       # cuBLAS workspaces stay (MiBs, part of any process)
    if left > LEAK_BYTES:
        raise RuntimeError(f"{left / GIB:.2f} GiB still allocated before the row (an earlier row leaked)")


def release(hooks: list = ()) -> None:
    """Free what a finished row left: its optimizer-in-backward hooks (`build`'s third value), reference cycles,
    the allocator's cache (a no-op off CUDA). In the first H200 run the hooks, not yet removed, kept mpt-1b's
    parameters and AdamW state (14.6 GiB) alive through the rows after it."""
    import gc

    import torch

    for h in hooks:
        h.remove()
    gc.collect()
    torch.cuda.empty_cache()


def predicted(spec, cfg: TrainingConfig, gpu_name: str | None) -> tuple[float, float, float | None]:
    """(allocated, reserved bytes, tokens/s) from the single job performance model (no CUDA context: the
    measurement does not count it either)."""
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.estimate.performance import step_of

    mem = estimate_memory(spec, cfg, context=False)
    tps = None
    if gpu_name:
        from gpuwise.hardware.gpus import get_gpu

        tps = step_of(spec, cfg, get_gpu(gpu_name), 1).tokens_per_s
    return mem.allocated, mem.reserved, tps


def gpu_row(device_name: str) -> str | None:
    """The gpus.csv row of a CUDA device by its torch name (e.g. 'NVIDIA H100 80GB HBM3', an alias there);
    None if the table does not know it."""
    from gpuwise.hardware.gpus import resolve_gpu_name

    return resolve_gpu_name(device_name)


def _gpu_name(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return gpu_row(torch.cuda.get_device_name(device))


def row(name: str, entry: tuple, device: str, layers: int | None) -> dict:
    """Measure and predict one GRID entry (`layers`: build that many layers, for quick harness checks)."""
    import torch

    from gpuwise.workload.models import load_model

    _, micro, seq, precision, recompute, lora, quantize, levers = entry
    spec = load_model(name)
    if layers:
        spec = dataclasses.replace(spec, n_layers=layers)
    cfg = config(micro, seq, precision, recompute, lora, quantize, levers)
    status, note = "ok", ""
    drawn = lengths_of(levers, seq)
    try:
        many = drawn or cfg.grad_accum > 1
        m = measure(spec, cfg, device, steps=VARYING_STEPS if many else 6 if cfg.compile else 4,   # compile: two
                    lengths=drawn)                                                                  # more after it
    except torch.cuda.OutOfMemoryError:
        status, m = "oom", Measured(None, None, float("nan"))
        release()
    except Exception as e:   # noqa: BLE001 -- one configuration that cannot run is a row, not the end of the grid
        status, note, m = "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", \
            Measured(None, None, float("nan"))
        if device.startswith("cuda"):
            release()
    gpu = _gpu_name(device)
    try:
        p_alloc, p_res, p_tps = predicted(spec, cfg, gpu)
    except Exception as e:   # noqa: BLE001 -- keep the measurement; the note says why no prediction
        p_alloc = p_res = p_tps = None
        note = f"{note}; " * bool(note) + f"no prediction: {type(e).__name__}: {str(e)[:120]}"
    gib = lambda b: None if b is None else round(b / GIB, 4)   # noqa: E731
    return {"status": status, "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else device,
            "torch": torch.__version__, "model": name, "layers": spec.n_layers, "micro_batch": micro, "seq_len": seq,
            "precision": precision, "recompute": recompute, "lora_rank": lora, "quantize": quantize or "",
            "levers": levers, "optimizer": f"{cfg.optimizer} ({cfg.optimizer_impl})", "measured_allocated_gib": gib(m.allocated),
            "measured_reserved_gib": gib(m.reserved), "predicted_allocated_gib": gib(p_alloc),
            "predicted_reserved_gib": gib(p_res), "measured_step_s": round(m.step_s, 5) if status == "ok" else None,
            # a step of drawn lengths or of two micro-batches is not micro x seq tokens: no tokens/s
            "measured_tokens_per_s": (round(micro * seq / m.step_s, 1) if status == "ok" and not drawn
                                      and cfg.grad_accum == 1 else None),
            "predicted_tokens_per_s": None if p_tps is None else round(p_tps, 1), "note": note}


def _key(entry: tuple, device: str, layers: int | None) -> tuple[str, ...]:
    """KEY of the row `row(...)` would write for `entry`, as the CSV stores it (strings)."""
    import torch

    from gpuwise.workload.models import load_model

    name, micro, seq, precision, recompute, lora, quantize, levers = entry
    dev = torch.cuda.get_device_name(device) if device.startswith("cuda") else device
    n = layers or load_model(name).n_layers
    return tuple(str(v) for v in (dev, name, n, micro, seq, precision, recompute, lora, quantize or "", levers))


def _override(entry: tuple, args: argparse.Namespace) -> tuple:
    name, micro, seq, precision, *rest = entry
    return (name, args.micro_batch or micro, args.seq_len or seq, args.precision or precision, *rest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.gpu_measure", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("gpuwise/data/measured/gpu/gpu_runs.csv"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", choices=sorted(SETS), default="grid",
                    help="grid: the configurations of the first run; check: the held-out ones; varying: drawn "
                         "lengths and two micro-batches a step (the allocator simulation's unmeasured parts)")
    ap.add_argument("--only", nargs="+", metavar="MODEL", help="measure these models of the grid only")
    ap.add_argument("--layers", type=int, help="build this many layers (harness checks on small machines)")
    ap.add_argument("--micro-batch", type=int, help="override every entry's micro-batch")
    ap.add_argument("--seq-len", type=int, help="override every entry's sequence length")
    ap.add_argument("--precision", help="override every entry's precision")
    args = ap.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_measure: --device: '{args.device}' is not available here (torch {torch.__version__} sees no "
              "CUDA GPU); run it on a GPU machine, or pass --device cpu to check the harness", file=sys.stderr)
        return 2
    entries = [_override(e, args) for e in SETS[args.set] if not args.only or e[0] in args.only]
    new = not args.out.exists()
    # resumed: rows measured (ok) or out of memory are done; an error row is measured again (the later row wins)
    done = set() if new else {tuple(r[k] for k in KEY) for r in csv.DictReader(args.out.open())
                              if r["status"] in ("ok", "oom")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS)
        if new:
            w.writeheader()
        for e in entries:
            if _key(e, args.device, args.layers) in done:
                print(f"skipped (already in {args.out}): {e}")
                continue
            r = row(e[0], e, args.device, args.layers)
            done.add(_key(e, args.device, args.layers))   # an override can make two entries one
            w.writerow(r)
            fh.flush()
            print(", ".join(f"{k}={v}" for k, v in r.items() if v not in (None, "")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
