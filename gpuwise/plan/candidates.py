"""Candidate generation: every allowed offering x node count x parallel plan x batch, priced
on-demand and on spot, as numpy columns.

Two stages, so the whole catalog is searched in about a second:
1. Per hardware shape (GPU type, GPUs per node, nodes) -- independent of cloud, region and price --
   every parallel plan that fits in memory (`allowed_plans`, cached per (GPU, GPU count,
   micro-batch)) x every allowed global batch x micro-batch is timed through the single entry point
   `gpuwise.estimate.performance` (memory, step time, checkpoint) and the job's statistical
   efficiency, with the one batch search (`batch_configs` + `best_of`) JobModel runs too. Its
   time to target is the same on every offering of that shape, and cost = time x price x nodes,
   so the fastest (plan, batch) of a shape is also the cheapest on every offering: keeping only it
   is exact. Two exact prunings keep this fast: plan variants that did not fit at a smaller
   micro-batch are not estimated again (`_known_miss`), and only configurations whose step-time
   lower bound can beat the shape's best are timed (`_timed_configs`); every one that fits still
   counts as evaluated. `generate(..., exhaustive=True)` turns both off (same answer).
2. Across offerings (vectorised): price x nodes, spot preemption risk (expected time and its
   p10/p90), constraints (max GPUs, $/hour cap, deadline, budget) as boolean masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from gpuwise.plan.job import PlanJob
from gpuwise.plan.offerings import RegionOffering, columns, filter_offerings, node_counts, region_offerings
from gpuwise.workload.training import ParallelPlan, TrainingConfig


@dataclass(frozen=True)
class RunOption:
    """The fastest way to train the job on one hardware shape."""

    gpu: str
    gpus_per_node: int
    nodes: int
    plan: ParallelPlan
    micro_batch: int
    grad_accum: int
    global_batch: int
    step_time_s: float
    train_hours: float            # time to target without preemptions
    mfu: float | None
    memory_gib: float             # per-GPU device total (reserved + CUDA context + NCCL: what nvidia-smi shows)
    checkpoint_gb: float          # bytes written per checkpoint (whole job)
    evaluated: int                # (plan, micro, batch) combinations that fit this shape (timed or pruned by the bound)
    config: TrainingConfig | None = None   # the full training configuration (recompute, sp, ...)
    memory_required_gib: float | None = None   # allocated + context + NCCL: what must fit (MemoryEstimate.required)

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def plan_label(self) -> str:
        return self.plan.label()


@dataclass(frozen=True)
class ShapeResult:
    """Outcome for one hardware shape: the best option, or why there is none."""

    best: RunOption | None
    evaluated: int
    reason: str | None            # "memory" | "batch" when best is None


@dataclass
class CandidateSet:
    """Columns over candidates (one row per offering x nodes x pricing)."""

    offerings: list[RegionOffering]
    options: list[RunOption]
    off_idx: np.ndarray           # row -> offerings index
    opt_idx: np.ndarray           # row -> options index
    nodes: np.ndarray
    gpus: np.ndarray
    spot: np.ndarray              # bool
    node_price: np.ndarray        # USD per node-hour
    hourly: np.ndarray            # USD per hour for the whole cluster
    time_h: np.ndarray            # expected hours to target (spot: with preemptions)
    time_p10: np.ndarray
    time_p90: np.ndarray
    cost: np.ndarray              # expected USD
    cost_p10: np.ndarray
    cost_p90: np.ndarray
    preemptions: np.ndarray       # expected preemptions (0 on demand)
    ckpt_interval_h: np.ndarray   # checkpoint interval used (nan on demand)
    preempt_rate: np.ndarray      # per node-hour (0 on demand)
    deadline_prob: np.ndarray     # P(finish by deadline) (1/0 on demand; nan without deadline)
    ok: np.ndarray                # bool: meets every hard constraint (max $/h, deadline, budget)
    evaluated: int                # configurations priced (offering x nodes x plan x batch x pricing)
    shapes: dict = field(default_factory=dict)   # (gpu, gpn, nodes) -> ShapeResult
    assumptions: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.off_idx.size)


# ---------------------------------------------------------------------------------------------
# stage 1: hardware shapes


@lru_cache(maxsize=None)
def _gpu(name: str):
    from gpuwise.hardware.gpus import get_gpu

    return get_gpu(name)


def _divides(a: int, b: int) -> bool:
    return b % a == 0


def recompute_variants(spec, cfg: TrainingConfig) -> tuple[str, ...]:
    """The recompute policies a layout is tried with, lightest first (recompute only saves memory)."""
    if not spec.is_transformer:
        return ("none",)
    # torchtitan op-level AC needs the attention kernel's saved output, as feasible_plans searches
    return ("none", "op", "full") if cfg.flash_attention else ("none", "full")


def allowed_plans(job: PlanJob, cfg: TrainingConfig, gpu, gpus: int, gpus_per_node: int | None = None,
                  misses: dict | None = None, configs: dict | None = None):
    """Plans of the job's allowed (tp, pp, ZeRO) degrees on exactly `gpus` GPUs that fit, with the
    lightest recompute / sequence-parallel variant that fits for each (tp, pp, zero).

    The same layouts and fitting rule as the memory engineer's `feasible_plans` (tp inside a node
    and dividing the heads, pp <= layers, pp micro-batches in flight, ZeRO 0 also at dp > 1,
    `estimate_memory(...).fits(gpu)`), but enumerated only over the degrees the job allows and
    cp = 1: `feasible_plans` walks every layout of large clusters (~0.1 s each at 256 GPUs),
    which alone would exceed the planner's time budget. Heavier variants of a layout that fits
    lighter are dropped: full recompute and sequence parallelism only save memory, never time.
    tests/test_plan_candidates.py checks this against `feasible_plans` itself.
    gpus_per_node None: any tp dividing `gpus` (memory does not depend on the node size; callers
    keep the tp that divide their node, see `_plans_for_shape`).
    misses: a dict shared by calls for the same job (any GPU, any micro-batch) that remembers variants
    that did not fit, so that a variant is not estimated where it provably cannot fit (`_known_miss`).
    configs: a dict shared by calls for the same `cfg` (any GPU) that keeps each variant's configuration
    (built once for every GPU type: the planner asks for each GPU count and micro-batch once per type).
    """
    from gpuwise.estimate.performance import memory_of

    spec = job.model
    layers = max(spec.n_layers + spec.n_encoder_layers, 1)
    heads_ok = (lambda tp: spec.n_heads % tp == 0 and spec.n_kv_heads % tp == 0) if spec.is_transformer \
        else (lambda tp: tp == 1)
    fields = cfg.__dict__
    configs = {} if configs is None else configs
    out = []
    for tp in job.tp:
        node_ok = gpus_per_node is None or (_divides(tp, gpus_per_node) and tp <= gpus_per_node)
        if not (_divides(tp, gpus) and node_ok and heads_ok(tp)):
            continue
        for pp in job.pp:
            if not _divides(pp, gpus // tp) or pp > layers or (pp > 1 and not spec.is_transformer):
                continue
            dp = gpus // (tp * pp)
            accum = max(cfg.grad_accum, pp)
            recomputes = recompute_variants(spec, cfg)
            sps = (tp > 1,)        # sequence parallel whenever tp > 1 (Megatron-core / torchtitan default)
            # lightest variant first; if it does not fit, the most frugal one decides whether any
            # variant can (memory falls with recompute and sequence parallelism), so a layout that
            # cannot fit costs two estimates, not four
            variants = [(r, sp) for r in recomputes for sp in sps]
            for zero in job.zero:
                if dp == 1 and zero != 0:
                    continue
                order = variants if len(variants) < 3 else [variants[0], variants[-1], *variants[1:-1]]
                hit = None
                for k, (recompute, sp) in enumerate(order):
                    key = (dp, tp, pp, sp, zero, accum, recompute)    # the variant but its micro-batch
                    if misses is not None and _known_miss(misses, key, cfg.micro_batch, gpu):
                        c, est, fits = None, None, False
                    else:
                        c = configs.get(key)
                        if c is None:
                            layout = ParallelPlan(dp=dp, tp=tp, pp=pp, sp=sp, zero=zero)
                            c = configs[key] = TrainingConfig(**{**fields, "grad_accum": accum,
                                                                 "recompute": recompute, "plan": layout})
                        est = memory_of(spec, c)
                        fits = est.fits(gpu)
                        if misses is not None and not fits:
                            misses.setdefault(key, []).append((cfg.micro_batch, est))
                    if k == 1 and len(order) > 2:
                        if not fits:
                            break                  # the most frugal variant does not fit
                        hit = hit or (c, est)      # remember it; a lighter one may still fit
                        continue
                    if fits:
                        hit = (c, est)
                        break
                if hit:
                    out.append(hit)
    return out


def _known_miss(misses: dict, key: tuple, micro_batch: int, gpu) -> bool:
    """True if the variant `key` (its settings but the micro-batch) at `micro_batch` provably does not fit
    `gpu`: the same variant at a micro-batch no larger did not fit it. Exact: with everything but the
    micro-batch fixed, every term of the required memory is either independent of the micro-batch
    (model states, context, NCCL, in-flight counts) or the
    micro-batch's tokens x a non-negative per-token size (activations, loss and backward temporaries),
    so each phase's sum, the peak over phases and stages and `required` never fall as it grows (and
    rounding is monotone), while `fits` compares `required` with the GPU's fixed usable memory.
    tests/test_plan_candidates.py compares the search with and without this against each other."""
    return any(m <= micro_batch and not est.fits(gpu) for m, est in misses.get(key, ()))


def _plans_for_shape(job: PlanJob, cfg: TrainingConfig, gpu, gpus: int, gpus_per_node: int, memo: dict):
    """allowed_plans for one node size, memoised per (GPU, GPU count, micro-batch)."""
    key = ("plans", gpu.name, gpus, cfg.micro_batch)
    if key not in memo:
        misses = None if memo.get("_exhaustive") else memo.setdefault("_misses", {})
        memo[key] = allowed_plans(job, cfg, gpu, gpus, misses=misses,
                                  configs=memo.setdefault(("configs", cfg.micro_batch), {}))
    return [(c, m) for c, m in memo[key] if c.plan.tp <= gpus_per_node and gpus_per_node % c.plan.tp == 0]


def _fitting_configs(job: PlanJob, spec, gpus: int, gpus_per_node: int, cache: dict, grid) -> tuple[list, bool]:
    """Every (config, memory) of the shape that fits, in search order (micro-batch, plan, batch), and
    whether any plan fitted at all; grid(dp, micro, min_accum) gives the (micro, accum) pairs tried."""
    from gpuwise.estimate.performance import memory_of

    out, any_fit = [], False
    for micro in job.micro_batches:
        cfg = TrainingConfig(**{**job.base.__dict__, "micro_batch": micro})
        fits = _plans_for_shape(job, cfg, spec, gpus, gpus_per_node, cache)
        if not fits:
            break   # a larger micro-batch needs more memory still
        any_fit = True
        for c, mem in fits:
            # pipeline plans need >= pp micro-batches per step (allowed_plans sets that floor)
            for _, accum in grid(c.plan.dp, micro, c.grad_accum):
                run_cfg = TrainingConfig(**{**c.__dict__, "grad_accum": accum})   # faster than replace()
                run_mem = mem if accum == c.grad_accum else memory_of(job.model, run_cfg)
                if run_mem.fits(spec):   # accumulation buffers (e.g. ZeRO-1/2 fp32 gradients) can tip it over
                    out.append((run_cfg, run_mem))
    return out, any_fit


def _timed_configs(job: PlanJob, spec, gpus_per_node: int, nodes: int, configs: list, exhaustive: bool) -> list:
    """(index, config, step estimate, memory) of the configurations that can be the fastest, in search order.

    Branch and bound, exact: a configuration's time to target is steps(global batch) x step time, and
    the step time is at least `step_bound_of` (its operator time). Timing in order of that bound, once
    a bound exceeds the best time found (by a relative 1e-9, far above rounding), it and every later one
    are strictly slower than the best, so they can neither win nor tie (`best_of` keeps the first of
    equals); the rest are timed and `best_of` picks among them exactly as among all. `exhaustive` times
    every configuration (the benchmark's and the tests' reference)."""
    from gpuwise.estimate.performance import step_bound_of, step_of

    steps = np.asarray(job.noise.steps(np.array([c.global_batch() for c, _ in configs], float)), float)
    order = range(len(configs))
    if not exhaustive:
        bound = steps * np.array([step_bound_of(job.model, c, spec) for c, _ in configs])
        order = np.argsort(bound, kind="stable").tolist()
    best, out = np.inf, []
    for i in order:
        if not exhaustive and bound[i] > best * (1 + 1e-9):
            break
        c, mem = configs[i]
        st = step_of(job.model, c, spec, gpus_per_node, nodes, job.inter_node_gbps)
        best = min(best, steps[i] * st.step_time_s)
        out.append((i, c, st, mem))
    return sorted(out, key=lambda t: t[0])


def evaluate_shape(job: PlanJob, gpu: str, gpus_per_node: int, nodes: int, cache: dict,
                   gpus: int | None = None) -> ShapeResult:
    """Fastest (plan, micro-batch, global batch) on `nodes` x `gpus_per_node` GPUs of type `gpu`
    (``gpus``: fewer GPUs than the nodes hold, e.g. `gpuwise estimate --gpus 12`). Every configuration
    that fits counts as evaluated; only those that can be the fastest are timed (`_timed_configs`;
    ``cache["_exhaustive"]`` true: every one, and every memory estimate too: see `generate`)."""
    from gpuwise.estimate.performance import batch_configs, best_of, job_performance

    gpus = gpus or gpus_per_node * nodes
    key = (gpu, gpus_per_node, nodes) if gpus == gpus_per_node * nodes else (gpu, gpus_per_node, nodes, gpus)
    if key in cache:
        return cache[key]
    spec = _gpu(gpu)
    lo_hi = job.batch_range

    def grid(dp: int, micro: int, floor: int):   # the one batch search's (micro, accum) pairs
        return batch_configs(dp, lo_hi, (micro,), min_accum=floor, targets=job.batches, tolerance=0.25).pairs

    configs, any_fit = _fitting_configs(job, spec, gpus, gpus_per_node, cache, grid)
    timed = _timed_configs(job, spec, gpus_per_node, nodes, configs, bool(cache.get("_exhaustive"))) \
        if configs else []
    st_notes = cache.setdefault("_step_notes", {})  # step-time model assumptions seen (ordered set)
    for _, _, st, _ in timed:
        for note in st.assumptions:
            # per-plan numbers, not an assumption; the rest depend on the model, GPU and node count only,
            # so the configurations not timed would add nothing
            if not note.startswith("pipeline bubble"):
                st_notes[note] = None
    best = None
    if timed:
        k, time_s = best_of([c.global_batch() for _, c, _, _ in timed], [st.step_time_s for _, _, st, _ in timed],
                            job.noise)
        _, c, st, mem = timed[k]
        ckpt = job_performance(job.model, c, spec, gpus_per_node, nodes, job.inter_node_gbps,
                               checkpoint_gb=job.checkpoint_gb).checkpoint
        cache.setdefault("_checkpoint_note", ckpt.assumption)
        best = RunOption(gpu, gpus_per_node, nodes, c.plan, c.micro_batch, c.grad_accum, c.global_batch(),
                         st.step_time_s, float(time_s[k]) / 3600.0, getattr(st, "mfu", None),
                         mem.per_gpu_gib, ckpt.gb, len(configs), c, mem.required / 2 ** 30)
    res = ShapeResult(best, len(configs), None if best else ("batch" if any_fit else "memory"))
    cache[key] = res
    return res


# ---------------------------------------------------------------------------------------------
# stage 2: offerings x node counts x pricing, vectorised


def _shape_rows(job: PlanJob, offs: list, cache: dict) -> tuple[list[RunOption], np.ndarray, np.ndarray,
                                                                 np.ndarray, np.ndarray]:
    """Stage 1 over the offerings: the distinct best options of their hardware shapes, and per (offering,
    node count) with an option its offering index, node count, option index and configurations evaluated."""
    options: list[RunOption] = []
    opt_of: dict[tuple[str, int, int], int] = {}
    r_idx, n_col, o_idx, evaluated = [], [], [], []
    for i, off in enumerate(offs):
        for n in node_counts(off.gpus_per_node, job.max_gpus):
            key = (off.gpu, off.gpus_per_node, n)
            res = evaluate_shape(job, *key, cache)
            if res.best is None:
                continue
            if key not in opt_of:
                opt_of[key] = len(options)
                options.append(res.best)
            r_idx.append(i)
            n_col.append(n)
            o_idx.append(opt_of[key])
            evaluated.append(res.evaluated)
    return options, *(np.array(x, dtype=np.int64) for x in (r_idx, n_col, o_idx, evaluated))


def generate(job: PlanJob, catalog, exhaustive: bool = False) -> CandidateSet:
    """All candidates of `job` on `catalog` (see the module docstring). ``exhaustive``: estimate every
    plan variant's memory and time every configuration that fits, without the exact pruning
    (`_known_miss`, `_timed_configs`): the same answer, slower (tests and benchmarks/plan_speed.py)."""
    rows, _ = filter_offerings(catalog, job.clouds, job.regions, job.gpus)
    offs = region_offerings(rows)
    cache: dict = {"_exhaustive": True} if exhaustive else {}
    options, r_idx, n_col, o_idx, per_row = _shape_rows(job, offs, cache)
    off_cols = columns(offs)
    od_price, sp_price = off_cols["price"], off_cols["spot_price"]
    modes = [False, True] if job.spot else [False]
    cols = {k: [] for k in ("off", "opt", "n", "spot", "price")}
    for spot in modes:
        price = (sp_price if spot else od_price)[r_idx] if r_idx.size else np.zeros(0)
        keep = np.isfinite(price)
        cols["off"].append(r_idx[keep])
        cols["opt"].append(o_idx[keep])
        cols["n"].append(n_col[keep])
        cols["spot"].append(np.full(int(keep.sum()), spot))
        cols["price"].append(price[keep])
    off_i = np.concatenate(cols["off"]) if cols["off"] else np.zeros(0, np.int64)
    opt_i = np.concatenate(cols["opt"]) if cols["opt"] else np.zeros(0, np.int64)
    nodes = np.concatenate(cols["n"]) if cols["n"] else np.zeros(0, np.int64)
    spot = np.concatenate(cols["spot"]).astype(bool) if cols["spot"] else np.zeros(0, bool)
    node_price = np.concatenate(cols["price"]) if cols["price"] else np.zeros(0)
    evaluated = int(sum(int(per_row[np.isfinite((sp_price if s else od_price)[r_idx])].sum())
                        for s in modes)) if r_idx.size else 0
    gpn = off_cols["gpn"][off_i]
    base_h = np.array([options[k].train_hours for k in opt_i], float) if opt_i.size else np.zeros(0)
    ckpt = np.array([options[k].checkpoint_gb for k in opt_i], float) if opt_i.size else np.zeros(0)
    hourly = node_price * nodes
    # spot risk
    rate = np.zeros(off_i.size)
    sources: dict[str, int] = {}
    if spot.any():
        from gpuwise.hardware.spot_risk import preemption_rate_per_hour

        per_off: dict[int, float] = {}
        for j in np.unique(off_i[spot]):
            risk = preemption_rate_per_hour(offs[j].example)
            per_off[int(j)] = float(risk.rate_per_hour)
            # "default: no <cloud> <gpu> trace; <where the default comes from>" -> one line per source
            src = risk.source.split("; ", 1)[-1] if risk.source.startswith("default") else risk.source
            key = f"{risk.rate_per_hour:.3g}/node-h from {src}"
            sources[key] = sources.get(key, 0) + 1
        rate[spot] = [per_off[int(j)] for j in off_i[spot]]
    time_h = base_h.copy()
    t10, t90 = base_h.copy(), base_h.copy()
    n_pre = np.zeros(off_i.size)
    interval = np.full(off_i.size, np.nan)
    prob = np.full(off_i.size, np.nan)
    if spot.any():
        from gpuwise.plan.spot import spot_columns

        d = spot_columns(base_h[spot], rate[spot], nodes[spot], ckpt[spot], write_gbps=job.checkpoint_write_gbps,
                         restart_h=job.restart_h, interval_h=job.checkpoint_interval_h,
                         deadline_h=job.deadline_hours)
        time_h[spot], t10[spot], t90[spot] = d.mean_h, d.p10_h, d.p90_h
        n_pre[spot], interval[spot] = d.expected_preemptions, d.interval_h
        if job.deadline_hours:
            prob[spot] = d.prob
    if job.deadline_hours:
        prob[~spot] = (base_h[~spot] <= job.deadline_hours).astype(float)
    cost, c10, c90 = time_h * hourly, t10 * hourly, t90 * hourly
    ok = np.isfinite(time_h)
    if job.max_usd_per_hour:
        ok &= hourly <= job.max_usd_per_hour
    if job.deadline_hours:
        ok &= time_h <= job.deadline_hours
    if job.budget_usd:
        ok &= cost <= job.budget_usd
    cs = CandidateSet(offs, options, off_i, opt_i, nodes, gpn * nodes, spot, node_price, hourly, time_h, t10,
                      t90, cost, c10, c90, n_pre, interval, rate, prob, ok, evaluated,
                      {k: v for k, v in cache.items() if isinstance(v, ShapeResult)})
    cs.assumptions = _assumptions(job, catalog, offs, cs, sources, list(cache.get("_step_notes", ())),
                                  cache.get("_checkpoint_note"))
    return cs


def _assumptions(job: PlanJob, catalog, offs, cs: CandidateSet, sources: dict[str, int],
                 step_notes: list[str], checkpoint_note: str | None = None) -> list[str]:
    from gpuwise.hardware.catalog import catalog_assumptions

    clouds = sorted({o.cloud for o in offs})
    out = list(job.assumptions)
    out += catalog_assumptions(catalog, clouds)
    out.append("prices: cheapest zone of each region; cost = expected time x hourly price x nodes "
               "(Scavenger eq. 5), billed for the whole wall-clock time")
    if len(cs):
        out.append(f"searched {len(offs)} offerings (cloud, region, instance) x {int(cs.nodes.min())}-"
                   f"{int(cs.nodes.max())} nodes x parallel plans (tp {list(job.tp)}, pp {list(job.pp)}, "
                   f"ZeRO {list(job.zero)}, cp 1) x global batches {list(job.batches)} x micro-batches: "
                   f"{cs.evaluated:,} configurations priced, {len(cs):,} candidates kept (the fastest plan "
                   "of each hardware shape is also its cheapest)")
        searched = ", ".join(recompute_variants(job.model, job.base))
        out.append(f"recompute: each layout takes the lightest of {searched} that fits (the job spec's "
                   f"'{job.base.recompute}' is not imposed; recompute only saves memory, never time)"
                   if job.model.is_transformer else "recompute: none (not modelled for explicit models)")
        if not job.model.is_transformer and not job.model.activation_bytes_per_sample:
            out.append("activations: NOT counted (the model gives no activation_bytes_per_sample); memory per "
                       "GPU is a lower bound")
    else:
        out.append(f"searched {len(offs)} offerings: no configuration fits")
    out.append("time to target = steps(global batch) x analytical step time; memory, step time and checkpoint "
               "from the single job performance model (estimate.performance); "
               + (checkpoint_note or (f"checkpoint {job.checkpoint_gb:g} GB" if job.checkpoint_gb else "checkpoint"))
               + f", written at {job.checkpoint_write_gbps:g} GB/s per node, restart "
               f"{job.restart_h * 60:.0f} min")
    # the efficiency factors and bandwidths the analytical step times rest on (estimate states them too)
    out += [f"step time: {n}" for n in step_notes]
    if sources:
        out.append("spot preemption rates: " + "; ".join(f"{s} ({n} offerings)" for s, n in sources.items()))
    return out
