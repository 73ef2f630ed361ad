"""The layout and batch search on one hardware shape: which parallel layout (dp/tp/pp, ZeRO stage,
recompute, sequence parallelism), micro-batch and gradient accumulation train the job soonest.

This is the search the goodput object (`gpuwise.estimate.goodput.JobGoodput`) runs for every caller:
the planner's candidates, `estimate`, the policies' goodput tables, the simulator's ground truth for
job-spec jobs, the service's prediction and the rent solver's speedups.

Every configuration is evaluated through the single entry point `gpuwise.estimate.performance`
(memory, step time, checkpoint) and the job's statistical efficiency, with the one batch search
(`batch_configs` + `best_of`). Two exact prunings keep it fast: plan variants that did not fit at a
smaller micro-batch are not estimated again (`_known_miss`), and only configurations whose step-time
lower bound can beat the shape's best are timed (`_timed_configs`); every one that fits still counts
as evaluated. ``cache["_exhaustive"]`` true turns both off (same answer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from gpuwise.estimate.job_space import FIXED_BATCH_ROUNDING, JobSpace
from gpuwise.estimate.layouts import layout_config, layouts, recompute_variants, zero_groups, zero_stages
from gpuwise.workload.training import ParallelPlan, TrainingConfig, with_changes


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
    batch_rounded: bool = False   # the fixed global batch could not be held exactly on this shape (see evaluate_shape)
    memory_reserved_gib: float | None = None   # the caching allocator's peak (torch.cuda.max_memory_reserved)
    host_s: float | None = None   # the host's time to dispatch the step's eager ops (None: not modelled; estimate.host_ops)

    @property
    def gpus(self) -> int:
        return self.plan.gpus

    @property
    def goodput(self) -> float:
        """Fraction of the whole job done per second on this shape (1 / time to target)."""
        return 1.0 / (self.train_hours * 3600.0) if self.train_hours > 0 else 0.0

    @property
    def plan_label(self) -> str:
        return self.plan.label()


@dataclass(frozen=True)
class ShapeResult:
    """Outcome for one hardware shape: the best option, or why there is none."""

    best: RunOption | None
    evaluated: int
    reason: str | None            # "memory" | "batch" when best is None




@lru_cache(maxsize=None)
def _gpu(name: str):
    from gpuwise.hardware.gpus import get_gpu

    return get_gpu(name)


def allowed_plans(job: JobSpace, cfg: TrainingConfig, gpu, gpus: int, gpus_per_node: int | None = None,
                  misses: dict | None = None, configs: dict | None = None):
    """Plans of the job's allowed (tp, pp, cp, ZeRO) degrees on exactly `gpus` GPUs that fit, with the
    lightest recompute variant that fits for each (tp, pp, cp, zero).

    The layouts, their validity rules and variants are `gpuwise.estimate.layouts` (shared with the memory
    question, `feasible_plans`), enumerated only over the degrees the job allows (cp: ``job.cp``, the job spec's
    parallelism.cp). Heavier variants of a layout that fits lighter are dropped: recompute only saves memory,
    never time. tests/test_plan_candidates.py checks this against `feasible_plans`.
    gpus_per_node None: any tp dividing `gpus` (memory does not depend on the node size; callers
    keep the tp that divide their node, see `_plans_for_shape`).
    misses: a dict shared by calls for the same job (any GPU, any micro-batch) that remembers variants
    that did not fit, so that a variant is not estimated where it provably cannot fit (`_known_miss`).
    configs: a dict shared by calls for the same `cfg` (any GPU) that keeps each variant's configuration and
    its memory estimate (built once for every GPU type: the planner asks for each GPU count and micro-batch
    once per type; the estimate depends on the model and the configuration only, not on the GPU).
    """
    from gpuwise.estimate.performance import memory_of

    spec = job.model
    configs = {} if configs is None else configs
    recomputes = recompute_variants(spec, cfg)
    # lightest variant first; if it does not fit, the most frugal one decides whether any
    # variant can (memory falls with recompute), so a layout that cannot fit costs two estimates, not three
    order = recomputes if len(recomputes) < 3 else (recomputes[0], recomputes[-1], *recomputes[1:-1])
    out = []
    for tp, pp, cp, dp in layouts(spec, cfg.seq_len, gpus, gpus_per_node, job.tp, job.pp, job.cp):
        accum = max(cfg.grad_accum, pp)
        for zero, group in ((z, g) for z in zero_stages(dp, job.zero) for g in zero_groups(spec, dp, cp, z, job.zero_shard)):
            hit = None
            for k, recompute in enumerate(order):
                key = (dp, tp, pp, cp, zero, group, accum, recompute)    # the variant but its micro-batch
                got = configs.get(key)   # estimated already (another GPU type): its own fit test is the cheaper
                if got is None and misses is not None and _known_miss(misses, key, cfg.micro_batch, gpu):
                    c, est, fits = None, None, False
                else:
                    if got is None:
                        c = layout_config(cfg, tp, pp, cp, dp, zero, recompute, group)
                        got = configs[key] = (c, memory_of(spec, c, memoise=False))   # kept here
                    c, est = got
                    fits = est.fits(gpu)
                    if misses is not None and not fits:
                        # one entry per micro-batch (its estimate is the same on every GPU type that misses)
                        misses.setdefault(key, {})[cfg.micro_batch] = est
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
    return any(m <= micro_batch and not est.fits(gpu) for m, est in misses.get(key, {}).items())


def _plans_for_shape(job: JobSpace, cfg: TrainingConfig, gpu, gpus: int, gpus_per_node: int, memo: dict):
    """allowed_plans for one node size, memoised per (GPU, GPU count, micro-batch) and, kept to the tp that
    divide the node, per node size too."""
    node_key = ("node plans", gpu.name, gpus, cfg.micro_batch, gpus_per_node)
    if node_key in memo:
        return memo[node_key]
    key = ("plans", gpu.name, gpus, cfg.micro_batch)
    if key not in memo:
        misses = None if memo.get("_exhaustive") else memo.setdefault("_misses", {})
        memo[key] = allowed_plans(job, cfg, gpu, gpus, misses=misses,
                                  configs=memo.setdefault(("configs", cfg.micro_batch), {}))
    out = memo[node_key] = [(c, m) for c, m in memo[key]
                            if c.plan.tp <= gpus_per_node and gpus_per_node % c.plan.tp == 0]
    return out


def _fitting_configs(job: JobSpace, spec, gpus: int, gpus_per_node: int, cache: dict, grid,
                     plan_runs: dict) -> tuple[list, bool]:
    """Every (config, memory, key) of the shape that fits, in search order (micro-batch, plan, batch), and
    whether any plan fitted at all; grid(dp, micro, min_accum) gives the (micro, accum) pairs tried; key
    names the configuration within the job (`_with_accum`). plan_runs: this grid's `_plan_runs` of each plan
    of (GPU, GPU count, micro-batch), kept for every node size of that count (the plans that fit a node are
    those whose tp divides it, in the same order)."""
    out, any_fit = [], False
    runs = cache.setdefault("_runs", {})
    for micro in job.micro_batches:
        cfg = with_changes(job.base, micro_batch=micro)
        if not _plans_for_shape(job, cfg, spec, gpus, gpus_per_node, cache):
            break   # a larger micro-batch needs more memory still
        any_fit = True
        plans = cache[("plans", spec.name, gpus, micro)]       # before the node filter (_plans_for_shape)
        done = plan_runs.setdefault((spec.name, gpus, micro), [None] * len(plans))
        for i, (c, mem) in enumerate(plans):
            if c.plan.tp <= gpus_per_node and gpus_per_node % c.plan.tp == 0:
                if done[i] is None:
                    done[i] = _plan_runs(job, c, mem, spec, grid, runs)
                out += done[i]
    return out, any_fit


def _plan_runs(job: JobSpace, c: TrainingConfig, mem, spec, grid, runs: dict) -> list:
    """The runs (`_with_accum`) of plan `c` (memory `mem`) that fit `spec`, one per (micro, accum) pair of the grid."""
    out = []
    # pipeline plans need >= pp micro-batches per step (allowed_plans sets that floor)
    for _, accum in grid(c.plan.dp, c.micro_batch, c.grad_accum):
        run = _with_accum(job, c, mem, accum, runs)
        if not run[1].fits(spec):   # accumulation buffers (e.g. ZeRO-1/2 fp32 gradients) can tip it over
            run = _heavier_fit(job, c, accum, runs, spec)
        if run is not None:
            out.append(run)
    return out


def _heavier_fit(job: JobSpace, c: TrainingConfig, accum: int, runs: dict, spec) -> tuple | None:
    """The layout of `c` with `accum` micro-batches under the lightest heavier recompute that fits `spec`
    (allowed_plans picks a layout's recompute without accumulation; its buffers can need more), else None."""
    variants = recompute_variants(job.model, c)
    for recompute in variants[variants.index(c.recompute) + 1:] if c.recompute in variants else ():
        run = _with_accum(job, with_changes(c, recompute=recompute), None, accum, runs)
        if run[1].fits(spec):
            return run
    return None


def _with_accum(job: JobSpace, c: TrainingConfig, mem, accum: int, runs: dict) -> tuple:
    """(`c` with `accum` micro-batches per step, its memory estimate, key), memoised in `runs` (shared by
    every shape of the job) under the key of the variant's settings: `c` is allowed_plans's configuration
    of them for the job, so the triple depends on the key only (the planner asks for it once per GPU type)."""
    from gpuwise.estimate.performance import memory_of

    p = c.plan
    key = (c.micro_batch, p.dp, p.tp, p.pp, p.cp, p.zero, p.zero_shard, c.grad_accum, c.recompute, accum)
    got = runs.get(key)
    if got is None:
        run_cfg = with_changes(c, grad_accum=accum)
        known = mem is not None and accum == c.grad_accum        # mem None: not estimated yet (_heavier_fit)
        got = runs[key] = (run_cfg, mem if known else memory_of(job.model, run_cfg, memoise=False), key)   # kept here
    return got


def _timed_configs(job: JobSpace, spec, gpus_per_node: int, nodes: int, configs: list, exhaustive: bool,
                   bounds: dict) -> list:
    """(index, config, step estimate, memory) of the configurations that can be the fastest, in search order.

    Branch and bound, exact: a configuration's time to target is steps(global batch) x step time, and
    the step time is at least `step_bound_of` (its operator time). Timing in order of that bound, once
    a bound exceeds the best time found (by a relative 1e-9, far above rounding), it and every later one
    are strictly slower than the best, so they can neither win nor tie (`best_of` keeps the first of
    equals); the rest are timed and `best_of` picks among them exactly as among all. `exhaustive` times
    every configuration (the benchmark's and the tests' reference). `bounds`: the step-time bounds of this
    GPU type by configuration key (`_fitting_configs`), shared by every shape of the job, and under "_micro_steps"
    their micro-step times by `step_time.micro_step_key` (the model and GPU are the job's and this type's)."""
    from gpuwise.estimate.performance import step_bound_of, step_of

    steps = np.asarray(job.noise.steps(np.array([c.global_batch() for c, _, _ in configs], float)), float)
    order = range(len(configs))
    if not exhaustive:
        micro_steps = bounds.setdefault("_micro_steps", {})     # this GPU's micro-step times (step_bound_of's memo)
        for c, _, key in configs:
            if key not in bounds:
                bounds[key] = step_bound_of(job.model, c, spec, micro_steps)
        bound = steps * np.array([bounds[key] for _, _, key in configs])
        order = np.argsort(bound, kind="stable").tolist()
    best, out = np.inf, []
    for i in order:
        if not exhaustive and bound[i] > best * (1 + 1e-9):
            break
        c, mem, _ = configs[i]
        st = step_of(job.model, c, spec, gpus_per_node, nodes, job.inter_node_gbps)
        best = min(best, steps[i] * st.step_time_s)
        out.append((i, c, st, mem))
    return sorted(out, key=lambda t: t[0])


def evaluate_shape(job: JobSpace, gpu: str, gpus_per_node: int, nodes: int, cache: dict,
                   gpus: int | None = None, batch: int | None = None,
                   inter_node_gbps: float | None = None) -> ShapeResult:
    """Fastest (plan, micro-batch, global batch) on `nodes` x `gpus_per_node` GPUs of type `gpu`
    (``gpus``: fewer GPUs than the nodes hold, e.g. `gpuwise estimate --gpus 12` or a policy's count).
    ``batch``: only this global batch, exactly (a policy's choice); None: the job's batch grid, and a
    fixed batch that no configuration of the shape holds exactly may be rounded by up to
    FIXED_BATCH_ROUNDING (then ``best.batch_rounded``). Every configuration that fits counts as
    evaluated; only those that can be the fastest are timed (`_timed_configs`; ``cache["_exhaustive"]``
    true: every one, and every memory estimate too). ``inter_node_gbps``: this shape's node network
    (e.g. a small VM's share of its host's NIC), overriding the job's."""
    gpus = gpus or gpus_per_node * nodes
    key = (gpu, gpus_per_node, nodes, gpus, batch, inter_node_gbps)
    if key in cache:
        return cache[key]
    if inter_node_gbps is not None and inter_node_gbps != job.inter_node_gbps:
        job = replace(job, inter_node_gbps=inter_node_gbps)
    lo_hi, targets = (job.batch_range, job.batches) if batch is None else ((batch, batch), (batch,))
    if batch is not None and not _holds_batch(job, gpus, batch):
        res = ShapeResult(None, 0, "batch")
    else:
        res = _search(job, gpu, gpus_per_node, nodes, gpus, cache, lo_hi, targets, 0.0)
    # the spec's fixed batch, asked for or implied, may be rounded where no layout holds it (flagged on the
    # option); a batch a policy chooses from a range is held exactly -- so `estimate`, the planner, the
    # policies and the simulator give one answer for a fixed-batch job on any shape
    if res.best is None and res.reason == "batch" and job.fixed_batch and batch in (None, job.batch_range[0]):
        res = _search(job, gpu, gpus_per_node, nodes, gpus, cache, job.batch_range, job.batches, FIXED_BATCH_ROUNDING)
    cache[key] = res
    return res


def _keep_step_notes(cache: dict, st) -> None:
    """Add the step-time assumptions of a shape's chosen configuration to the job's (an ordered set). Only the
    chosen one's: some lines hold that configuration's numbers or layout (NF4 dequantisation and offload seconds,
    the AsyncTP share 1/tp, the hybrid ZeRO-1 group), and the configurations timed besides it depend on the
    branch and bound, so their lines would make the job's assumptions differ between the pruned and the
    exhaustive search. Per-plan states (bubble, host-bound, host-op counts) are not kept at all."""
    notes = cache.setdefault("_step_notes", {})
    for note in st.assumptions:
        if not note.startswith(("pipeline bubble", "host-bound", "host-op count of this configuration")):
            notes[note] = None


def _holds_batch(job: JobSpace, gpus: int, batch: int) -> bool:
    """Whether some allowed (tp, pp) leaves a data-parallel degree that divides ``batch`` exactly
    (global batch = dp x micro-batch x accumulation): exact, so a shape that fails it is skipped
    without estimating anything."""
    return any(gpus % (tp * pp) == 0 and batch % (gpus // (tp * pp)) == 0 for tp in job.tp for pp in job.pp)


def _search(job: JobSpace, gpu: str, gpus_per_node: int, nodes: int, gpus: int, cache: dict,
            lo_hi: tuple[int, int], targets: tuple[int, ...], tolerance: float) -> ShapeResult:
    from gpuwise.estimate.performance import batch_configs, best_of, job_performance

    spec = _gpu(gpu)

    grids = cache.setdefault(("grids", lo_hi, targets, tolerance), {})   # the same for every shape of the job

    def grid(dp: int, micro: int, floor: int):   # the one batch search's (micro, accum) pairs
        key = (dp, micro, floor)
        if key not in grids:
            grids[key] = batch_configs(dp, lo_hi, (micro,), min_accum=floor, targets=targets,
                                       tolerance=tolerance).pairs
        return grids[key]

    configs, any_fit = _fitting_configs(job, spec, gpus, gpus_per_node, cache, grid,
                                        cache.setdefault(("plan runs", lo_hi, targets, tolerance), {}))
    timed = _timed_configs(job, spec, gpus_per_node, nodes, configs, bool(cache.get("_exhaustive")),
                           cache.setdefault(("bounds", gpu), {})) if configs else []
    best = None
    if timed:
        k, time_s = best_of([c.global_batch() for _, c, _, _ in timed], [st.step_time_s for _, _, st, _ in timed],
                            job.noise)
        _, c, st, mem = timed[k]
        _keep_step_notes(cache, st)
        ckpt = job_performance(job.model, c, spec, gpus_per_node, nodes, job.inter_node_gbps,
                               checkpoint_gb=job.checkpoint_gb).checkpoint
        cache.setdefault("_checkpoint_note", ckpt.assumption)
        gb = c.global_batch()
        best = RunOption(gpu, gpus_per_node, nodes, c.plan, c.micro_batch, c.grad_accum, gb,
                         st.step_time_s, float(time_s[k]) / 3600.0, getattr(st, "mfu", None),
                         mem.per_gpu_gib, ckpt.gb, len(configs), c, mem.required / 2 ** 30,
                         batch_rounded=gb not in targets, memory_reserved_gib=mem.reserved / 2 ** 30,
                         host_s=getattr(st, "host_s", None))
    return ShapeResult(best, len(configs), None if best else ("batch" if any_fit else "memory"))


