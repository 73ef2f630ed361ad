"""Count the host work of an eager PyTorch training step on real modules: the aten ops one step dispatches.

Every aten op costs the host a trip through the dispatcher (and autograd), and most launch a kernel; when the
GPU finishes its kernels faster than the host issues them, the step takes the host's time (small models, short
sequences, LoRA). `gpuwise.estimate.host_ops` turns the counts written here into that floor.

How: one warm training step of gpuwise.nn's model of a preset (the model the trace and the GPU harness run),
at tiny widths on the CPU (an op count does not depend on widths), under a TorchDispatchMode that counts the
aten ops of the forward + backward and, apart, of the optimizer step. Per family, at 1 and 2 layers:
per-layer ops = ops(2) - ops(1), fixed ops = ops(1) - per-layer; the same with every block checkpointed (full
recompute) and with LoRA on q,v and on every linear (the frozen base's ops and one adapter's: its dropout, A, B,
scale and add, forward and backward). Universal rows: each optimizer implementation's ops as a fixed part plus a
part per trainable tensor. Precision bf16-mixed, loss eager, SDPA attention, batch 1 x 16 tokens.

    python -m gpuwise.validation.host_ops            # print the counts
    python -m gpuwise.validation.host_ops --write    # rewrite gpuwise/data/calibration/host_ops.csv
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from gpuwise.data import data_path
from gpuwise.workload.training import TrainingConfig

# one preset per family that has a gpuwise.nn decoder-only model (the family's layer code is what is counted)
FAMILY_PRESETS = {"llama": "llama-3.1-8b", "mistral": "mistral-7b", "qwen2": "qwen2.5-0.5b", "gemma": "gemma-2b",
                  "gpt2": "gpt2", "gpt_neox": "gpt-neox-20b", "gptj": "gpt-j-6b", "falcon": "falcon-7b",
                  "mpt": "mpt-1b", "bloom": "bloom-560m", "phi": "phi-1.5", "mixtral": "mixtral-8x7b",
                  "phi3": "phi-3-mini-4k-instruct", "qwen3": "qwen3-8b"}
IMPLS = ("fused", "foreach", "per-param")
# the precisions counted apart: autocast casts every weight in forward; pure 16-bit and fp32 loops do not
PRECISIONS = ("bf16-mixed", "bf16", "fp32")
COLUMNS = ("family", "precision", "code", "preset", "layer_ops", "head_ops", "recompute_layer_ops", "recompute_head_ops", "lora_layer_ops",
           "lora_target_ops", "lora_head_ops", "lora_recompute_layer_ops", "lora_recompute_target_ops",
           "chunked_loss_ops", "tensors_per_layer", "tensors_fixed")


# the widths every count runs at (an op count does not depend on them): also host_ops_hf's transformers configs
TINY = {"hidden": 64, "heads": 4, "head_dim": 16, "ffn": 128, "vocab": 256, "positions": 64}


def tiny_kv_heads(heads: int, kv_heads: int) -> int:
    """Key/value heads at TINY["heads"] query heads, keeping the model's GQA ratio."""
    return max(1, TINY["heads"] * kv_heads // max(heads, 1))


def _tiny(spec, layers: int):
    """``spec`` at tiny widths (structure kept: families, GQA ratio, gating, biases, experts)."""
    return replace(spec, n_layers=layers, hidden=TINY["hidden"], n_heads=TINY["heads"],
                   n_kv_heads=tiny_kv_heads(spec.n_heads, spec.n_kv_heads), head_dim=TINY["head_dim"],
                   ffn_hidden=TINY["ffn"], vocab_size=TINY["vocab"], max_seq_len=TINY["positions"])


def op_counter():
    """A TorchDispatchMode that counts every aten op dispatched inside it (``.n``)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    return Count()


def count(spec, cfg: TrainingConfig, impl: str = "fused") -> tuple[int, int, int]:
    """(forward + backward ops, optimizer-step ops, trainable tensors) of one warm step of ``spec`` under ``cfg``."""
    import torch

    from gpuwise.trace.precision import dtypes
    from gpuwise.trace.run import build_rank_model

    model = build_rank_model(spec, cfg, dtypes(cfg.precision, False), device="cpu")
    params = [p for p in model.parameters() if p.requires_grad]
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True}, "per-param": {"foreach": False}}[impl]
    opt = torch.optim.AdamW(params, lr=1e-4, **flags)
    ids = torch.randint(0, spec.vocab_size, (1, 16))
    counts = []
    for _ in range(2):                       # the first step creates the optimizer state: count the second
        opt.zero_grad(set_to_none=True)
        fb, st = op_counter(), op_counter()
        with fb:
            model(ids, ids).backward()
        with st:
            opt.step()
        counts = [fb.n, st.n]
    return counts[0], counts[1], len(params)


def _per_layer(spec, cfg: TrainingConfig, impl: str = "fused") -> tuple[int, int, int, int, int, int]:
    """(per-layer, fixed) of the forward + backward ops, the optimizer ops and the trainable tensors."""
    one, two = count(_tiny(spec, 1), cfg, impl), count(_tiny(spec, 2), cfg, impl)
    out = []
    for a, b in zip(one, two):
        out += [b - a, a - (b - a)]
    return tuple(out)


BASE = TrainingConfig(micro_batch=1, seq_len=16, precision="bf16-mixed", optimizer_impl="fused")


def family_row(family: str, precision: str = "bf16-mixed") -> dict:
    """One family's counts at one precision (see the module docstring)."""
    from gpuwise.estimate.lora import adapted_linears
    from gpuwise.workload.models import load_model

    spec = load_model(FAMILY_PRESETS[family])
    base = replace(BASE, precision=precision)
    fb, fixed, _, _, tensors, tensors_fixed = _per_layer(spec, base)
    full, full_fixed = _per_layer(spec, replace(base, recompute="full"))[:2]
    chunked = count(_tiny(spec, 1), replace(base, loss_kernel="chunked"))[0] - count(_tiny(spec, 1), base)[0]
    # LoRA on q,v and on every linear: the frozen base's ops and each adapter's (its dropout, A, B, scale, add)
    lora = replace(base, lora_rank=8)
    (qv, qv_fixed), every = (_per_layer(spec, replace(lora, lora_targets="q,v"))[:2],
                             _per_layer(spec, replace(lora, lora_targets="all-linear"))[0])
    qv_re, every_re = (_per_layer(spec, replace(lora, lora_targets=t, recompute="full"))[0] for t in ("q,v", "all-linear"))
    n_qv, n_all = adapted_linears(spec, "q,v"), adapted_linears(spec, "all-linear")
    target = (every - qv) / (n_all - n_qv)
    target_re = (every_re - qv_re) / (n_all - n_qv) - target
    return {"family": family, "precision": precision, "code": "gpuwise.nn", "preset": FAMILY_PRESETS[family],
            "layer_ops": fb,
            "head_ops": fixed, "recompute_layer_ops": full - fb, "recompute_head_ops": full_fixed - fixed,
            "lora_layer_ops": round(qv - n_qv * target, 2),
            "lora_target_ops": round(target, 2), "lora_head_ops": qv_fixed,
            "lora_recompute_layer_ops": round(qv_re - qv - n_qv * target_re, 2),
            "lora_recompute_target_ops": round(target_re, 2), "chunked_loss_ops": chunked,
            "tensors_per_layer": tensors, "tensors_fixed": tensors_fixed}


def universal() -> dict:
    """Each AdamW implementation's (fixed, per trainable tensor) ops, counted on the llama preset."""
    from gpuwise.workload.models import load_model

    spec, out = load_model(FAMILY_PRESETS["llama"]), {}
    for impl in IMPLS:
        _, _, opt_layer, opt_fixed, tensors, tensors_fixed = _per_layer(spec, BASE, impl)
        per_tensor = opt_layer / tensors
        out[f"opt_{impl}_fixed"] = round(opt_fixed - per_tensor * tensors_fixed, 1)
        out[f"opt_{impl}_per_tensor"] = round(per_tensor, 2)
    return out


def rows() -> tuple[list[dict], dict]:
    """Every family's gpuwise.nn rows, the transformers rows of the families host_ops_hf writes, the universal."""
    from gpuwise.validation import host_ops_hf

    nn_rows = [family_row(f, p) for f in FAMILY_PRESETS for p in PRECISIONS]
    return nn_rows + [host_ops_hf.family_row(r) for r in nn_rows if r["family"] in host_ops_hf.FAMILIES], universal()


def write(fam: list[dict], uni: dict, path=None) -> None:
    """Rewrite host_ops.csv from `rows`' counts."""
    import torch

    path = path or data_path("calibration", "host_ops.csv")
    lines = [
        "# Host work of an eager PyTorch training step: aten ops dispatched, counted on gpuwise.nn's model of each",
        "# family's preset, and on transformers' own models (code column) by `python -m",
        "# gpuwise.validation.host_ops --write`: TorchDispatchMode over one warm step at tiny widths on the CPU, torch",
        f"# {torch.__version__}, eager loss, SDPA, batch 1; per precision (autocast casts weights; pure 16-bit and fp32",
        "# loops do not). Columns, forward + backward: layer_ops / head_ops = per layer / fixed (embedding, final norm,",
        "# output layer, loss), from the 1- and 2-layer counts (a fixed part can come out negative: an artefact of that",
        "# difference, exact in the sum); recompute_layer_ops / recompute_head_ops = the extra per layer / fixed with",
        "# every block checkpointed;",
        "# lora_layer_ops, lora_head_ops = per layer / fixed with the base frozen, adapters apart; lora_target_ops = one",
        "# adapter's ops; lora_recompute_layer_ops / lora_recompute_target_ops = full recompute's extra per layer (frozen",
        "# base) / per adapter; chunked_loss_ops = the extra fixed ops of an 8-chunk cross-entropy; tensors = trainable",
        "# parameter tensors of a full fine-tune. code: the model code counted, gpuwise.nn or transformers (the",
        "# hf-trainer / ms-swift stacks; validation/host_ops_hf.py: adapters and the chunked loss from the gpuwise.nn",
        "# row). Rows named universal: each AdamW implementation's ops = fixed +",
        "# per_tensor x trainable tensors (bf16-mixed llama).",
        ",".join(COLUMNS)]
    lines += [",".join(str(r[c]) for c in COLUMNS) for r in fam]
    lines += [f"universal,,,{k},{v}" + "," * (len(COLUMNS) - 5) for k, v in uni.items()]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


def fit_host_s_per_op() -> tuple[float, str]:
    """(seconds per op, the row that sets it): the largest host cost per op under which no measured eager step of
    gpuwise's H200 grid (gpu_runs.csv: its rows without torch.compile and without a harness caveat) is shorter than
    its counted ops x that cost: a floor may never exceed a measurement (estimate/host_ops.HOST_S_PER_OP)."""
    from gpuwise.estimate.host_ops import step_ops
    from gpuwise.validation.gpu_measure import config
    from gpuwise.validation.gpu_runs import compare
    from gpuwise.workload.models import load_model

    best = (float("inf"), "")
    for r in compare("grid"):
        cfg = config(*r.entry[1:])
        if cfg.compile or r.caveat:
            continue
        ops = step_ops(load_model(r.model), cfg)
        if ops is None:            # a family without counts has no floor to bound
            continue
        step = cfg.micro_batch * cfg.seq_len / r.measured_tokens_per_s
        best = min(best, (step / ops, f"{r.model} {cfg.micro_batch}x{cfg.seq_len}: {step * 1e3:.1f} ms, {ops:,.0f} ops"))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.host_ops", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite gpuwise/data/calibration/host_ops.csv")
    args = ap.parse_args(argv)
    fam, uni = rows()
    if args.write:
        write(fam, uni)
    for r in fam:
        print(r)
    print(uni)
    s, where = fit_host_s_per_op()
    print(f"host seconds per op (floor rule on the H200 grid): {s * 1e6:.1f} us, set by {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
