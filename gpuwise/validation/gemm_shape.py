"""Does the GEMM efficiency of the transformer step model depend on the problem's shape? A test, not a fit the model uses.

For every measured Hopper row timed with the ``pytorch`` op_efficiency.csv row -- the H200 grid and check runs
(``gpu_runs``), IBM's 96-H100 FSDP runs and Lambda's 1x/8x H100 runs (``steptime_fit``) -- and, timed with that row
x a stack factor, llm.c's and universal-llm-trainer's H100 rows (``stack_efficiency``), this module computes

- the IMPLIED GEMM efficiency: the op_efficiency.csv ``gemm`` constant (x w/(w+w0) as the model applies it) at which
  the model's tokens/s equals the measured one, every other term held (attention, memory, launch, communication);
- the shape: tokens per micro-step per GPU (M, the GEMMs' row count), hidden size and FFN width (N, K), the
  FLOP-weighted geometric mean of the forward FLOPs per GEMM call, the sequence length (attention);

and fits a saturating law in M, gemm(M) = e_max x M / (M + M0), leave-one-source-out over the three Hopper pytorch
sources (h200-grid, ibm-fsdp-blog, lambda-fa2; the H200 check rows are scored, never fitted). M is the same for every
GEMM of a micro-step, so the law is one ``gemm`` value per configuration: ``predict`` needs no change to the model.

Result (calibration README, "GEMM efficiency and the problem's shape"): not adopted. Run
``python -m gpuwise.validation.gemm_shape`` for the table and the fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig

HOPPER_PYTORCH_SOURCES = ("h200-grid", "ibm-fsdp-blog", "lambda-fa2")
HELD_OUT = "h200-check"


@dataclass(frozen=True)
class Case:
    """One measured configuration as the step model is asked about it."""

    source: str
    case: str
    model: ModelSpec
    cfg: TrainingConfig
    gpu: str                       # gpus.csv name
    gpus_per_node: int
    inter_node_gbps: float | None
    interleave: int
    measured: float                # tokens/s/GPU

    @property
    def tokens_per_micro_step(self) -> float:
        return self.cfg.micro_batch * self.cfg.seq_len / self.cfg.plan.cp


def _efficiency(c: Case, gemm: float | None = None, factor: float | None = None):
    """The op_efficiency row ``c`` is timed with; ``gemm`` replaces the base row's GEMM constant (a stack timed
    with another stack's row x factor keeps its factor on top, as roofline_step.scaled_efficiency does: the stored
    one, or ``factor``)."""
    from gpuwise.estimate.roofline_step import (
        StackFactor,
        base_efficiency,
        op_efficiency_table,
        scaled_efficiency,
        stack_factor,
    )
    from gpuwise.hardware.gpus import get_gpu

    arch = get_gpu(c.gpu).architecture.split()[0]
    stack = c.cfg.stack
    own = (arch, stack) in op_efficiency_table()
    base = op_efficiency_table()[arch, stack] if own else base_efficiency(arch, stack)
    if gemm is not None:
        base = replace(base, gemm=gemm)
    if own:
        return base
    return scaled_efficiency(base, stack_factor(stack) if factor is None else StackFactor(stack, factor, 1, "", ""))


def predict(c: Case, gemm: float | None = None, factor: float | None = None) -> float:
    """Predicted tokens/s/GPU of ``c`` (``gemm``: another GEMM constant for its base op_efficiency row; ``factor``:
    another stack factor for a stack timed with another stack's row)."""
    from gpuwise.estimate.step_time import analytical_step_time
    from gpuwise.hardware.gpus import get_gpu

    est = analytical_step_time(c.model, c.cfg, get_gpu(c.gpu), c.gpus_per_node, None, c.inter_node_gbps,
                               pipeline_interleave=c.interleave, efficiency=_efficiency(c, gemm, factor))
    return est.tokens_per_s_per_gpu


def implied_gemm(c: Case, factor: float | None = None, lo: float = 0.05, hi: float = 3.0) -> float | None:
    """The GEMM constant at which ``predict(c, g, factor)`` equals the measurement (bisection: tokens/s rises with
    it); None when even ``hi`` (3x peak: impossible) is too slow or ``lo`` too fast -- other terms alone miss the
    row. A stack timed with the pytorch row x a factor: ``factor=1.0`` gives the GEMM efficiency its kernels reach."""
    f = lambda g: math.log(predict(c, g, factor) / c.measured)
    if f(lo) > 0 or f(hi) < 0:
        return None
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return math.sqrt(lo * hi)


def gemm_flops_per_call(c: Case) -> float:
    """FLOP-weighted geometric mean of the forward FLOPs of one call of each of a layer's GEMMs on one GPU."""
    from gpuwise.estimate.op_inventory import GEMM, op_table

    tab = op_table(c.model)
    rows = (tab.cls == GEMM) & (tab.scope == 0)
    flops = c.tokens_per_micro_step * tab.f_tok[rows] / c.cfg.plan.tp
    return float(np.exp(np.average(np.log(flops), weights=flops)))


def m_law(m: float, e_max: float, m0: float) -> float:
    """GEMM efficiency at M tokens per micro-step: saturating, e_max at M >> M0, half of it at M = M0."""
    return e_max * m / (m + m0)


def log_errors(cases: list[Case], law: tuple[float, float] | None, factor: float | None = None) -> np.ndarray:
    """log(predicted / measured) of each case, under the law (None: today's op_efficiency.csv); ``factor``: the
    stack factor of a stack timed with the pytorch row (None: the stored one)."""
    return np.array([math.log(predict(c, None if law is None else m_law(c.tokens_per_micro_step, *law), factor)
                              / c.measured) for c in cases])


def fit_m_law(cases: list[Case]) -> tuple[float, float]:
    """(e_max, M0) by least squares on log(predicted / measured) over ``cases``."""
    from scipy.optimize import least_squares

    sol = least_squares(lambda p: log_errors(cases, (p[0], p[1])), [0.7, 4096.0], bounds=([0.2, 0.0], [0.95, 1e6]),
                        x_scale=[0.1, 1000.0])
    return float(sol.x[0]), float(sol.x[1])


def _calibration_cases() -> list[Case]:
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.validation.stack_efficiency import external_runs
    from gpuwise.validation.steptime_fit import measured_runs

    runs = [r for r in measured_runs() + external_runs() if get_gpu(r.gpu).architecture.startswith("Hopper")
            and r.cfg.stack != "megatron"]
    return [Case(r.source, r.case, r.model, r.cfg, r.gpu, 8, r.inter_node_gbps, r.interleave, r.tokens_per_s_per_gpu)
            for r in runs]


def _gpu_run_cases() -> list[Case]:
    """bf16 rows of the H200 grid and check sets without a caveat (the headline rows of `validate gpu`)."""
    from gpuwise.hardware.gpus import resolve_gpu_name
    from gpuwise.validation.gpu_measure import config
    from gpuwise.validation.gpu_runs import (
        SETS,
        config_caveat,
        config_key,
        measured_rows,
    )
    from gpuwise.workload.models import load_model

    out = []
    for name, path in SETS.items():
        for r in measured_rows(path):
            e = config_key(r)
            if config_caveat(e) or e[3] != "bf16-mixed":
                continue
            case = f"{e[0]} mb{e[1]} seq{e[2]} {e[4]}" + (f" lora{e[5]}" if e[5] else "") + (f" {e[7]}" if e[7] else "")
            out.append(Case(f"h200-{name}", case, load_model(e[0]), config(*e[1:]), resolve_gpu_name(r["device"]), 1,
                            None, 1, float(r["measured_tokens_per_s"])))
    return out


def hopper_cases() -> dict[str, list[Case]]:
    """{source: cases} of every Hopper row timed with the pytorch op_efficiency row (or it x a stack factor)."""
    out: dict[str, list[Case]] = {}
    for c in _calibration_cases() + _gpu_run_cases():
        out.setdefault(c.source, []).append(c)
    return out


def leave_one_source_out(cases: dict[str, list[Case]]) -> dict[str, tuple[tuple[float, float], np.ndarray]]:
    """{source: ((e_max, M0) fitted on the other Hopper pytorch sources, its rows' log errors under them)}; the
    held-out check rows are scored with the law fitted on all three sources."""
    out = {}
    for src in HOPPER_PYTORCH_SOURCES:
        law = fit_m_law([c for s in HOPPER_PYTORCH_SOURCES if s != src for c in cases[s]])
        out[src] = law, log_errors(cases[src], law)
    law = fit_m_law([c for s in HOPPER_PYTORCH_SOURCES for c in cases[s]])
    out[HELD_OUT] = law, log_errors(cases[HELD_OUT], law)
    return out


def _pct(e: np.ndarray) -> str:
    r = np.exp(e) - 1
    return f"median |err| {np.median(np.abs(r)):5.1%}, max {np.max(np.abs(r)):5.1%}, signed median {np.median(r):+6.1%}"


def _main() -> None:
    cases = hopper_cases()
    print(f"{'source':22s} {'case':44s} {'M':>6s} {'h':>5s} {'ffn':>6s} {'seq':>6s} {'GF/GEMM':>8s} "
          f"{'today':>6s} {'implied gemm':>12s}")
    for src, cs in cases.items():
        for c in cs:
            g = implied_gemm(c, 1.0)          # other stacks: their kernels' efficiency (factor 1)
            print(f"{src:22s} {c.case[:44]:44s} {c.tokens_per_micro_step:6.0f} {c.model.hidden:5d} {c.model.ffn_hidden:6d} "
                  f"{c.cfg.seq_len:6d} {gemm_flops_per_call(c) / 1e9:8.0f} {predict(c) / c.measured - 1:+6.1%} "
                  f"{'-' if g is None else f'{g:.3f}':>12s}")
    for src in cases:
        print(f"today's model        {src:22s} {_pct(log_errors(cases[src], None, 1.0))}")
    loso = leave_one_source_out(cases)
    for src, (law, err) in loso.items():
        how = "fitted on all three sources" if src == HELD_OUT else "left out"
        print(f"M-law ({how:27s}) {src:14s} e_max {law[0]:.3f} M0 {law[1]:6.0f}: {_pct(err)}")
    for src in set(cases) - set(HOPPER_PYTORCH_SOURCES) - {HELD_OUT}:
        print(f"M-law (all three sources), stack factor 1 (validate throughput's LOSO default) {src}: "
              f"{_pct(log_errors(cases[src], loso[HELD_OUT][0], 1.0))}")


if __name__ == "__main__":
    _main()
