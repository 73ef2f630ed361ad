"""Calibration and validation of the per-operator transformer step-time model on public measurements.

Measured runs: ``gpuwise/data/calibration/transformer_throughput.csv`` (megatron stack: NVIDIA DGX Cloud
benchmarking Llama 3.1 8B/70B/405B on H100; pytorch stack: FlashAttention's GPT-3 125M-2.7B on 8x A100,
Lambda's GPT-3 2.7B on A100/H100, IBM's PyTorch FSDP Llama-2 7B-70B on A100/H100, TinyLlama 1.1B) and
Korthikanti et al. 2022 Table 5 (``megatron_korthikanti2022_via_calculon.csv``, 22B-1T on A100, megatron).
Rows marked ``fit`` (Korthikanti: all 8) fit the GEMM efficiency per (generation, stack), the launch cost
and the GEMM half-width of ``gpuwise/data/calibration/op_efficiency.csv``; the others are held out.
Errors are reported on
tokens/s/GPU, per source and per size class (parameters < 1B, 1-10B, 10-100B, > 100B).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from gpuwise.data import data_path, read_commented_csv
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import ParallelPlan, TrainingConfig

SIZE_CLASSES = (("<1B", 0, 1e9), ("1-10B", 1e9, 1e10), ("10-100B", 1e10, 1e11), (">100B", 1e11, float("inf")))
ARCHS = ("Ampere", "Hopper")
# (architecture, stack) rows of op_efficiency.csv that are fitted, in the order of the parameter vector
FITTED = tuple((a, s) for s in ("megatron", "pytorch") for a in ARCHS)
SELENE_NIC_GBPS = 200.0     # Selene DGX A100 nodes: 8 x 200 Gb/s HDR InfiniBand


@dataclass(frozen=True)
class MeasuredRun:
    source: str
    case: str
    model: ModelSpec
    cfg: TrainingConfig
    gpu: str
    interleave: int
    inter_node_gbps: float
    tokens_per_s_per_gpu: float      # measured
    split: str                       # "fit" | "heldout"

    @property
    def params(self) -> int:
        from gpuwise.workload.models import param_count

        return param_count(self.model)

    @property
    def size_class(self) -> str:
        p = self.params
        return next(name for name, lo, hi in SIZE_CLASSES if lo <= p < hi)


def model_from_dims(name: str, family: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int,
                    seq: int) -> ModelSpec:
    """A Llama (gated MLP, RMSNorm, rotary) or GPT (biases, LayerNorm, learned positions) model of measured rows
    that give its dimensions, not a preset name."""
    llama = family == "llama"
    return ModelSpec(name=name, family="llama" if llama else "gpt", n_layers=layers, hidden=hidden, n_heads=heads,
                     n_kv_heads=kv, head_dim=hidden // heads, ffn_hidden=ffn, vocab_size=vocab, max_seq_len=seq,
                     gated_mlp=llama, norm="rmsnorm" if llama else "layernorm", learned_pos_emb=not llama,
                     attn_bias=not llama, mlp_bias=not llama)


def _throughput_rows() -> list[MeasuredRun]:
    out = []
    for r in read_commented_csv(data_path("calibration", "transformer_throughput.csv")):
        i = {k: int(r[k]) for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "gpus", "tp",
                                    "pp", "cp", "vp", "dp", "zero", "sp", "micro_batch", "global_batch")}
        model = model_from_dims(r["case"].split()[0], r["family"], i["layers"], i["hidden"], i["heads"], i["kv_heads"],
                                i["ffn"], i["vocab"], i["seq_len"])
        accum = i["global_batch"] // (i["micro_batch"] * i["dp"])
        cfg = TrainingConfig(micro_batch=i["micro_batch"], seq_len=i["seq_len"], grad_accum=accum,
                             precision="bf16-mixed", recompute=r["recompute"], stack=r["stack"],
                             plan=ParallelPlan(dp=i["dp"], tp=i["tp"], pp=i["pp"], cp=i["cp"], sp=bool(i["sp"]),
                                               zero=i["zero"]))
        value = float(r["value"])
        tokens = i["global_batch"] * i["seq_len"]
        per_gpu = {"s/step": tokens / value / i["gpus"], "tokens/s": value / i["gpus"],
                   "tokens/s/gpu": value}[r["unit"]]
        out.append(MeasuredRun(r["source"], r["case"], model, cfg, r["gpu"], i["vp"], float(r["inter_node_gbps"]),
                               per_gpu, r["split"]))
    return out


def _korthikanti_rows() -> list[MeasuredRun]:
    out = []
    with open(data_path("measured", "megatron_korthikanti2022_via_calculon.csv"), newline="") as fh:
        for r in csv.DictReader(fh):
            if r["source_item"] != "tab5":
                continue
            h, heads, seq = int(r["hidden"]), int(r["heads"]), int(r["seq_len"])
            model = model_from_dims(r["model"], "gpt", int(r["layers"]), h, heads, heads, int(r["ffn"]), 51200, seq)
            tp, pp, dp = int(r["tp"]), int(r["pp"]), int(r["dp"])
            mb, gb = int(r["micro_batch"]), int(r["global_batch"])
            rec = "full" if r["recompute_mode"] == "full" else "selective"
            cfg = TrainingConfig(micro_batch=mb, seq_len=seq, grad_accum=gb // (mb * dp), recompute=rec,
                                 stack="megatron",
                                 plan=ParallelPlan(dp=dp, tp=tp, pp=pp, sp=rec != "full"))
            gpus = tp * pp * dp
            out.append(MeasuredRun("korthikanti-tab5", f"{r['model']} {r['recompute_mode']} tp{tp} pp{pp}", model, cfg,
                                   "A100-80GB-SXM", int(r["pipeline_interleaving"]), SELENE_NIC_GBPS,
                                   gb * seq / float(r["value"]) / gpus, "fit"))
    return out


@lru_cache(maxsize=1)
def measured_runs() -> tuple[MeasuredRun, ...]:
    return tuple(_korthikanti_rows() + _throughput_rows())


def predict(run: MeasuredRun, efficiency=None) -> float:
    """Predicted tokens/s/GPU of a measured run."""
    from gpuwise.estimate.step_time import analytical_step_time
    from gpuwise.hardware.gpus import get_gpu

    est = analytical_step_time(run.model, run.cfg, get_gpu(run.gpu), 8, None, run.inter_node_gbps,
                               pipeline_interleave=run.interleave, efficiency=efficiency)
    return est.tokens_per_s_per_gpu


# HBM efficiency is not fitted: STREAM-type copy kernels reach 2.90 of 3.35 TB/s on H100 SXM and 4.01 of
# 4.8 TB/s on H200 (Azure ND H100 v5 / ND H200 v5 published microbenchmarks, samuel-bohman/AI-benchmarking-guide),
# ~0.85 of datasheet bandwidth; elementwise training kernels are taken to reach the same share.
MEMORY_EFFICIENCY = 0.85
# Flash-attention efficiency is not fitted either (with ~20 runs it trades off against the GEMM efficiency and ran
# to 0.13-0.23 of peak, half of what the kernels measure): it is fixed per (generation, stack) at the fwd+bwd rate of
# the stack's kernel at 2k-8k causal tokens, head dim 128, from the kernel papers' benchmarks.
#   Ampere: FlashAttention-2 (both stacks' A100 runs) reaches up to 73% of peak forward and 63% backward (Dao 2023,
#     arXiv 2307.08691); causal at 2k-8k tokens a little less: 0.55.
#   Hopper, pytorch: FlashAttention-2 on H100 (SDPA's flash backend) runs 298-333 TFLOP/s forward, causal 2k-8k
#     (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, H100 SXM5 forward benchmark): 0.30 of 989 with backward.
#   Hopper, megatron: Transformer Engine's cuDNN fused attention 484-529 TFLOP/s in the same benchmark: 0.45.
ATTENTION_EFFICIENCY = {("Ampere", "megatron"): 0.55, ("Ampere", "pytorch"): 0.55,
                        ("Hopper", "megatron"): 0.45, ("Hopper", "pytorch"): 0.30}
# prior on the per-kernel cost: CUDA launch latency is a few microseconds (weight: one factor of 3 = one residual unit)
LAUNCH_PRIOR_US, LAUNCH_PRIOR_FACTOR = 5.0, 3.0


def _effs(x: np.ndarray, base) -> dict:
    """Parameter vector -> OpEfficiency per (architecture, stack): GEMM efficiency per architecture and stack;
    launch cost and GEMM half-width shared; attention and HBM efficiencies fixed (above)."""
    gemm, (launch_us, w0) = x[:4], x[4:]
    common = dict(memory=MEMORY_EFFICIENCY, launch_s=launch_us * 1e-6, gemm_w0=w0)
    return {key: replace(base[key], gemm=g, attention=ATTENTION_EFFICIENCY[key], **common)
            for key, g in zip(FITTED, gemm)}


def _key(run: MeasuredRun) -> tuple[str, str]:
    from gpuwise.hardware.gpus import get_gpu

    return get_gpu(run.gpu).architecture.split()[0], run.cfg.stack


def fit_op_efficiency(runs=None) -> dict:
    """Least squares on log(predicted / measured) tokens/s/GPU over the ``fit`` rows (SciPy TRF with bounds,
    plus the launch-cost prior). Returns {architecture: OpEfficiency} with points and fitted_on filled in."""
    from scipy.optimize import least_squares

    from gpuwise.estimate.roofline_step import op_efficiency_table

    runs = [r for r in (runs or measured_runs()) if r.split == "fit"]
    base = op_efficiency_table()
    meas = np.array([r.tokens_per_s_per_gpu for r in runs])
    keys = [_key(r) for r in runs]

    def resid(x):
        effs = _effs(x, base)
        fit = np.log([predict(r, effs[k]) for r, k in zip(runs, keys)]) - np.log(meas)
        return np.append(fit, np.log(x[4] / LAUNCH_PRIOR_US) / np.log(LAUNCH_PRIOR_FACTOR) * 0.05)

    x0 = np.array([0.8, 0.7, 0.8, 0.7, 5.0, 300.0])
    lo = np.array([0.3, 0.3, 0.3, 0.3, 0.5, 0.0])
    hi = np.array([0.92, 0.92, 0.92, 0.92, 50.0, 3000.0])
    sol = least_squares(resid, x0, bounds=(lo, hi), x_scale=np.array([0.1, 0.1, 0.1, 0.1, 2, 100]))
    effs = _effs(sol.x, base)
    counts = {key: sum(1 for k in keys if k == key) for key in FITTED}
    for key in FITTED:
        own = [r for r, k in zip(runs, keys) if k == key]
        if not own:     # no data constrains this GEMM efficiency (a left-out source's only rows)
            effs[key] = _transferred(key, effs, counts, base)
            continue
        sources = " ".join(sorted({r.source for r in own}))
        effs[key] = replace(effs[key], points=len(own),
                            fitted_on=f"GEMM efficiency on {len(own)} split=fit {key[0]} {key[1]} rows ({sources}); "
                                      f"launch and w0 shared by all {len(runs)} fit rows; attention fixed from "
                                      "kernel benchmarks (FlashAttention-2/3 papers); HBM efficiency "
                                      f"{MEMORY_EFFICIENCY} fixed from "
                                      "published STREAM-type copy rates")
    return effs


def _transferred(key: tuple[str, str], effs: dict, counts: dict, base: dict):
    """GEMM efficiency of an (architecture, stack) pair without fit rows, from the three fitted pairs around it as if
    architecture and stack were separable factors: gemm[a, s] = gemm[a', s] x gemm[a, s'] / gemm[a', s']; the stated
    default row of the stack when those are not all fitted either."""
    (arch, stack), (arch2,), (stack2,) = key, set(ARCHS) - {key[0]}, {s for _, s in FITTED} - {key[1]}
    around = ((arch2, stack), (arch, stack2), (arch2, stack2))
    if all(counts[k] for k in around):
        g = min(0.92, effs[around[0]].gemm * effs[around[1]].gemm / effs[around[2]].gemm)
        return replace(effs[key], gemm=g, points=0,
                       fitted_on=f"no split=fit {arch} {stack} rows: transferred as {arch2} {stack} x {arch} {stack2} / "
                                 f"{arch2} {stack2}")
    return replace(base["default", stack], architecture=arch, points=0,
                   fitted_on=f"no split=fit {arch} {stack} rows: the default {stack} row")


def write_op_efficiency(effs: dict) -> None:
    """Rewrite the fitted rows of op_efficiency.csv (comment lines and other rows kept)."""
    path = data_path("calibration", "op_efficiency.csv")
    lines = open(path).read().splitlines()
    out = []
    for line in lines:
        key = tuple(line.split(",")[:2])
        if key in effs and not line.startswith("#"):
            e = effs[key]
            line = (f"{key[0]},{key[1]},{e.gemm:.3f},{e.gemm_w0:.0f},{e.attention:.3f},{e.memory:.3f},"
                    f"{e.launch_s * 1e6:.2f},{e.points},{e.fitted_on}")
        out.append(line)
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


@dataclass
class RunError:
    run: MeasuredRun
    predicted: float

    @property
    def error(self) -> float:
        return abs(self.predicted - self.run.tokens_per_s_per_gpu) / self.run.tokens_per_s_per_gpu


def evaluate(runs=None) -> list[RunError]:
    return [RunError(r, predict(r)) for r in (runs or measured_runs())]


def summarise(errors: list[RunError]) -> dict[str, dict]:
    """Median / max error and count per split, per source (with split) and per size class (with split)."""
    groups: dict[str, list[float]] = {}
    for e in errors:
        for key in (f"all/{e.run.split}", f"source/{e.run.source}/{e.run.split}",
                    f"stack/{e.run.cfg.stack}/{e.run.split}",
                    f"size/{e.run.size_class}/{e.run.split}", f"size/{e.run.size_class}/all", "all/all"):
            groups.setdefault(key, []).append(e.error)
    return {k: {"median_error": float(np.median(v)), "max_error": float(np.max(v)), "points": len(v)}
            for k, v in sorted(groups.items())}



def leave_source_out(source: str, promote: str | None = None) -> list[RunError]:
    """Refit without ``source``'s rows (``promote``: a held-out case name to fit on instead, e.g. the only
    other run of that stack and generation) and predict that source's rows: an out-of-source error."""
    from dataclasses import replace as swap

    runs = [swap(r, split="heldout") if r.source == source else
            swap(r, split="fit") if promote and r.case == promote else r for r in measured_runs()]
    effs = fit_op_efficiency(runs)
    return [RunError(r, predict(r, effs[_key(r)])) for r in runs if r.source == source]


def _main() -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gpuwise.validation.steptime_fit",
                                 description="errors of the stored step-time fit per measured run; --write refits "
                                             "op_efficiency.csv; --leave-out SOURCE refits without that source")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--leave-out", metavar="SOURCE")
    ap.add_argument("--promote", metavar="CASE", help="with --leave-out: a held-out case to fit on instead")
    args = ap.parse_args()
    if args.write:
        from gpuwise.estimate.roofline_step import op_efficiency_table

        write_op_efficiency(fit_op_efficiency())
        op_efficiency_table.cache_clear()
    errors = leave_source_out(args.leave_out, args.promote) if args.leave_out else evaluate()
    for e in errors:
        print(f"{e.run.source:20s} {e.run.case:46s} {e.run.cfg.stack:8s} {e.run.split:7s} "
              f"measured {e.run.tokens_per_s_per_gpu:9.0f} predicted {e.predicted:9.0f} "
              f"{e.predicted / e.run.tokens_per_s_per_gpu - 1:+.1%}")
    errs = [e.error for e in errors]
    print(f"median |error| {np.median(errs):.1%}, max {np.max(errs):.1%} over {len(errs)} runs")


if __name__ == "__main__":
    _main()
