"""The memory question over the one layout enumeration: every parallel plan of a training job that
fits on `gpus` GPUs of one type at the caller's micro-batch, ranked, and the fewest GPUs where one fits.

Asked through the job's goodput object (`gpuwise.estimate.goodput.JobGoodput.fitting_plans` /
``fewest_fitting`` / ``memory_floor``): `gpuwise fit-gpus`, `estimate`'s nearest feasible option and
`plan`'s infeasibility hint. The layouts, their validity rules and recompute variants are
`gpuwise.estimate.layouts` (shared with the goodput search, `layout_search.allowed_plans`; that
module's docstring lists what differs between the two questions and why). This view takes every degree
(tp, pp, cp, ZeRO 0-3) and keeps every recompute variant that fits, not only the lightest.

Pruning: for one (tp, pp, cp) layout memory falls from ZeRO 0 to 1 to 2 and from no
recompute to selective/op to full (tested properties; ZeRO-3 is tried on its own because its
gathered-layer buffer can exceed its savings on very short stages), so the search walks from the
most frugal variant and stops at the first that does not fit. Results are memoised per (model, cfg, gpu, gpus, gpus_per_node).

Ranking (lower first) uses a cheap, unitless proxy of the time a plan loses to communication and
recomputation, so the least sharded / least recomputed plan that fits comes first:
  recompute        none 0, selective 0.03 (attention core re-run, Korthikanti et al. 2022:
                   2-4% overhead), op 0.12 (every second matmul re-run: ~36% of a llama block's
                   matmul FLOPs = 0.12 of a step), full 0.33 (one extra forward = 1/3 of a step)
  tensor parallel  0.04 * log2(tp)   (two all-reduces of activations per layer, NVLink)
  sequence par.    0                 (same volume as TP's all-reduce, split into RS + AG)
  pipeline         bubble (pp - 1) / (m + pp - 1) with m = micro-batches per step
  context par.     0.05 * log2(cp)   (K/V exchange per layer)
  ZeRO             0, 1: 0.001, 2: 0.002 (same volume as data-parallel all-reduce),
                   3: 0.10 (weights all-gathered in forward and backward: 1.5x the DP volume)
Ties are broken by lower per-GPU memory (more headroom).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import log2

from gpuwise.errors import InputError
from gpuwise.estimate.layouts import divisors, layout_config, layouts, pipeline_limit, recompute_variants, tp_ok
from gpuwise.estimate.memory import MemoryEstimate
from gpuwise.estimate.performance import memory_bound_of, memory_of
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig

# recompute cost ~ recomputed forward FLOPs / step FLOPs: op-level SAC recomputes ~36% of the matmuls (llama)
RECOMPUTE_COST = {"none": 0.0, "selective": 0.03, "op": 0.12, "full": 0.33}
ZERO_COST = {0: 0.0, 1: 0.001, 2: 0.002, 3: 0.10}
TP_COST, CP_COST = 0.04, 0.05
RECOMPUTE_ORDER = ("none", "selective", "op", "full")


def plan_cost(cfg: TrainingConfig) -> float:
    """The ranking proxy above (unitless; lower is better)."""
    p = cfg.plan
    bubble = (p.pp - 1) / (cfg.grad_accum + p.pp - 1) if p.pp > 1 else 0.0
    return (RECOMPUTE_COST[cfg.recompute] + ZERO_COST[p.zero] + TP_COST * log2(p.tp) + CP_COST * log2(p.cp)
            + bubble)


def _layouts(spec: ModelSpec, cfg: TrainingConfig, gpus: int, gpus_per_node: int):
    """(tp, pp, cp, dp) layouts allowed on exactly `gpus` GPUs: every valid degree (`layouts`)."""
    return layouts(spec, cfg.seq_len, gpus, gpus_per_node, tp=None, pp=None, cp=None)


def _fits(spec: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec) -> MemoryEstimate | None:
    est = memory_of(spec, cfg)
    return est if est.fits(gpu) else None


@lru_cache(maxsize=4096)
def _feasible(spec: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, gpus: int, gpus_per_node: int
              ) -> tuple[tuple[TrainingConfig, MemoryEstimate], ...]:
    out: list[tuple[float, float, str, TrainingConfig, MemoryEstimate]] = []
    frugal_first = recompute_variants(spec, cfg)[::-1]   # most frugal first: stop when nothing fits any more
    for tp, pp, cp, dp in _layouts(spec, cfg, gpus, gpus_per_node):
        for recompute in frugal_first:
            found = False
            if dp > 1:                     # ZeRO-3 adds a gathered layer, so it is tried on its own
                c = layout_config(cfg, tp, pp, cp, dp, 3, recompute)
                est = _fits(spec, c, gpu)
                if est is not None:
                    found = True
                    out.append((plan_cost(c), est.total, c.plan.label(), c, est))
            for zero in (2, 1, 0) if dp > 1 else (0,):   # memory rises from stage 2 down to 0
                c = layout_config(cfg, tp, pp, cp, dp, zero, recompute)
                est = _fits(spec, c, gpu)
                if est is None:
                    break
                found = True
                out.append((plan_cost(c), est.total, c.plan.label(), c, est))
            if not found:
                break
    out.sort(key=lambda r: (r[0], r[1], r[2]))
    return tuple((c, e) for _, _, _, c, e in out)


def feasible_plans(model: ModelSpec | str, cfg: TrainingConfig, gpu: GpuSpec, gpus: int,
                   gpus_per_node: int = 8) -> list[tuple[TrainingConfig, MemoryEstimate]]:
    """Every plan on exactly `gpus` GPUs of type `gpu` that fits, best (cheapest proxy) first.

    cfg supplies micro-batch (per GPU), sequence length, precision, optimizer, LoRA/NF4, offload
    and flash attention; its plan and recompute fields are replaced by the enumeration."""
    if not isinstance(gpus, int) or gpus <= 0:
        raise InputError("gpus", gpus, "must be a positive integer")
    if not isinstance(gpus_per_node, int) or gpus_per_node <= 0:
        raise InputError("gpus-per-node", gpus_per_node, "must be a positive integer")
    spec = load_model(model)
    base = replace(cfg, plan=ParallelPlan(), recompute="none")
    return list(_feasible(spec, base, gpu, gpus, gpus_per_node))


def _frugal(spec: ModelSpec, cfg: TrainingConfig, tp: int, pp: int, cp: int, dp: int) -> TrainingConfig:
    """The most frugal variant of a layout: the heaviest recompute, the highest ZeRO stage the levers allow when
    dp > 1 (3, or 2 where ZeRO-3 is blocked: a GPTQ base)."""
    from gpuwise.estimate.levers import blocked

    recompute = recompute_variants(spec, cfg)[-1]
    for zero in ((3, 2, 1) if dp > 1 else ()):
        frugal = layout_config(cfg, tp, pp, cp, dp, zero, recompute)
        if blocked(frugal) is None:
            return frugal
    return layout_config(cfg, tp, pp, cp, dp, 0, recompute)


def _least_required(spec: ModelSpec, cfgs: list[TrainingConfig]) -> MemoryEstimate | None:
    """The estimate with the smallest `required` over cfgs (the first such cfg on a tie), as if every one were
    estimated, but the full estimate runs only where the cheap lower bound (first and last pipeline stage)
    does not already exceed the best so far: candidates go in order of their bound, and once a bound exceeds
    the best, so do all that follow. The 1e-9 margin covers rounding between bound and estimate."""
    bounds = sorted((memory_bound_of(spec, c), i) for i, c in enumerate(cfgs))
    best, best_i = None, -1
    for bound, i in bounds:
        if best is not None and bound * (1 - 1e-9) > best.required:
            break
        est = memory_of(spec, cfgs[i])
        if best is None or (est.required, i) < (best.required, best_i):
            best, best_i = est, i
    return best


@lru_cache(maxsize=256)
def memory_floor(spec: ModelSpec, cfg: TrainingConfig, max_gpus: int, gpus_per_node: int) -> MemoryEstimate | None:
    """The smallest frugal per-GPU estimate over every plan on at most `max_gpus` GPUs (None: no layout).

    A cheap bound checked before the search over 1..max_gpus: for one (tp, pp, cp) the frugal variant
    (full recompute, ZeRO-3) only shrinks as dp grows, so each (tp, pp, cp) is evaluated once, at the
    largest dp that max_gpus allows. If this floor does not fit a GPU, no plan on <= max_gpus of it fits,
    and a config too large for every GPU is refused in well under a second (it used to take minutes;
    _least_required estimates in full only the few layouts whose lower bound can win)."""
    return _least_required(spec, _floor_configs(spec, cfg, stack_gpu_limit(cfg, max_gpus), gpus_per_node))


def stack_gpu_limit(cfg: TrainingConfig, max_gpus: int) -> int:
    """`max_gpus`, or 1 for a stack that trains on one GPU only (stacks.csv gpus; levers.blocked refuses more)."""
    from gpuwise.workload.stacks import stack_row

    return 1 if stack_row(cfg.stack).gpus == "one" else max_gpus


def _floor_configs(spec: ModelSpec, cfg: TrainingConfig, max_gpus: int, gpus_per_node: int) -> list[TrainingConfig]:
    """The frugal variant of every (tp, pp, cp) on at most max_gpus GPUs, at the largest dp it allows."""
    if not spec.is_transformer:
        shapes = [(1, 1, 1)]
    else:
        # the validity rules of `layouts` but for divisibility: at most (not exactly) max_gpus GPUs
        layers, cps = pipeline_limit(spec), _divisors_upto(cfg.seq_len, max_gpus)
        shapes = [(tp, pp, cp) for tp in divisors(min(gpus_per_node, max_gpus)) if tp_ok(spec, tp, gpus_per_node)
                  for pp in range(1, min(layers, max_gpus // tp) + 1) for cp in cps if tp * pp * cp <= max_gpus]
    return [_frugal(spec, cfg, tp, pp, cp, max_gpus // (tp * pp * cp)) for tp, pp, cp in shapes]


def _divisors_upto(n: int, limit: int) -> list[int]:
    """Divisors of n up to `limit` (n may be huge: a 1e9-token sequence)."""
    from math import isqrt

    small = [d for d in range(1, min(isqrt(n), limit) + 1) if n % d == 0]
    return sorted({d for s_ in small for d in (s_, n // s_) if d <= limit})


@lru_cache(maxsize=8192)
def _frugal_min(spec: ModelSpec, cfg: TrainingConfig, gpus: int, gpus_per_node: int) -> MemoryEstimate | None:
    """The smallest frugal-variant estimate over the layouts on exactly `gpus` GPUs (GPU-independent, so
    shared by every GPU type searched): some plan fits a GPU iff this one does (fits compares `required` with the GPU)."""
    return _least_required(spec, [_frugal(spec, cfg, *shape) for shape in _layouts(spec, cfg, gpus, gpus_per_node)])


def _first_candidate(spec: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, max_gpus: int, gpus_per_node: int) -> int:
    """A GPU count below which nothing fits: the floor is non-increasing in the GPU count, so the largest
    power of two whose floor does not fit bounds the linear search from below."""
    start, p = 1, 1
    while p * 2 <= max_gpus:
        f = memory_floor(spec, cfg, p * 2, gpus_per_node)
        if f is not None and f.fits(gpu):
            break
        p *= 2
        start = p + 1
    return start


@lru_cache(maxsize=4096)
def _fewest(spec: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, max_gpus: int, gpus_per_node: int):
    floor = memory_floor(spec, cfg, max_gpus, gpus_per_node)
    if floor is None or not floor.fits(gpu):
        return None
    for n in range(_first_candidate(spec, cfg, gpu, max_gpus, gpus_per_node), max_gpus + 1):
        best = _frugal_min(spec, cfg, n, gpus_per_node)
        if best is not None and best.fits(gpu):
            return n, _feasible(spec, cfg, gpu, n, gpus_per_node)
    return None


def fewest_gpus(model: ModelSpec | str, cfg: TrainingConfig, gpu: GpuSpec, max_gpus: int = 1024,
                gpus_per_node: int = 8) -> tuple[int, list[tuple[TrainingConfig, MemoryEstimate]]] | None:
    """The smallest GPU count (1..max_gpus) on which some plan fits, with its ranked plans;
    None if nothing fits on max_gpus GPUs of this type."""
    if not isinstance(max_gpus, int) or max_gpus <= 0:
        raise InputError("max-gpus", max_gpus, "must be a positive integer")
    spec = load_model(model)
    base = replace(cfg, plan=ParallelPlan(), recompute="none")
    found = _fewest(spec, base, gpu, stack_gpu_limit(cfg, max_gpus), gpus_per_node)
    return None if found is None else (found[0], list(found[1]))
