"""Candidate generation: every allowed offering x node count x parallel plan x batch, priced
on-demand and on spot, as numpy columns.

Two stages, so the whole catalog is searched in about a second:
1. Per hardware shape (GPU type, GPUs per node, nodes) -- independent of cloud, region and price --
   the job's goodput object (`gpuwise.estimate.goodput.JobGoodput.shape`, the layout and batch search
   of `gpuwise.estimate.layout_search`, shared with `estimate`, the policies, the simulator and the
   service) gives the fastest (layout, micro-batch, global batch). Its time to target is the same on
   every offering of that shape, and cost = time x price x nodes, so the fastest configuration of a
   shape is also the cheapest on every offering: keeping only it is exact.
   `generate(..., exhaustive=True)` searches without the exact prunings (same answer).
2. Across offerings (vectorised): price x nodes, spot preemption risk (expected time and its
   p10/p90), constraints (max GPUs, $/hour cap, deadline, budget) as boolean masks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwise.estimate.goodput import JobGoodput
from gpuwise.estimate.job_space import FIXED_BATCH_ROUNDING
from gpuwise.estimate.layout_search import RunOption, recompute_variants
from gpuwise.plan.job import PlanJob
from gpuwise.plan.offerings import (NODE_NETWORK_NOTE, RegionOffering, columns, filter_offerings, node_counts,
                                    node_network, region_offerings, spot_floors, spot_outliers)


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
    outlier: np.ndarray | None = None   # bool: a spot row whose price is below its GPU type's floor
    spot_floors: dict = field(default_factory=dict)   # GPU -> offerings.SpotFloor (the floor's numbers)

    def __len__(self) -> int:
        return int(self.off_idx.size)


# ---------------------------------------------------------------------------------------------
# stage 2: offerings x node counts x pricing, vectorised


def _shape_rows(job: PlanJob, offs: list, good: JobGoodput, nic: dict | None = None,
                ) -> tuple[list[RunOption], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stage 1 over the offerings: the distinct best options of their hardware shapes, and per (offering,
    node count) with an option its offering index, node count, option index and configurations evaluated."""
    options: list[RunOption] = []
    opt_of: dict[tuple[str, int, int], int] = {}
    r_idx, n_col, o_idx, evaluated = [], [], [], []
    for i, off in enumerate(offs):
        for n in node_counts(off.gpus_per_node, job.max_gpus):
            key = (off.gpu, off.gpus_per_node, n)
            # the node's own network (nic: (gpu, GPUs per node) -> GB/s), part of the hardware shape
            res = good.shape(*key, inter_node_gbps=(nic or {}).get(key[:2]))
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
    good = JobGoodput(job.space, exhaustive=True) if exhaustive else job.goodput
    nic = None if job.inter_node_gbps else node_network(offs, _market(catalog))
    options, r_idx, n_col, o_idx, per_row = _shape_rows(job, offs, good, nic)
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
    rate, sources = _spot_rates(offs, off_i, spot)
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
    if job.deadline_hours:   # met at p90 (= expected time on demand), not in expectation
        ok &= t90 <= job.deadline_hours
    if job.budget_usd:
        ok &= cost <= job.budget_usd
    cs = CandidateSet(offs, options, off_i, opt_i, nodes, gpn * nodes, spot, node_price, hourly, time_h, t10,
                      t90, cost, c10, c90, n_pre, interval, rate, prob, ok, evaluated,
                      good.searched_shapes())
    # the floors come from the whole catalog, so that --cloud or --gpu does not move them
    cs.spot_floors = spot_floors(region_offerings(_market(catalog)))
    cs.outlier = spot & spot_outliers(offs, cs.spot_floors)[off_i] if off_i.size else np.zeros(0, bool)
    cs.assumptions = _assumptions(job, catalog, offs, cs, sources, good.step_notes(), good.checkpoint_note())
    return cs


def _spot_rates(offs: list, off_i: np.ndarray, spot: np.ndarray) -> tuple[np.ndarray, dict[str, set]]:
    """Preemption rate per node-hour of each row (0 on demand), and where each rate comes from -> the GPU
    classes it is used for (a class without its own trace says so)."""
    rate = np.zeros(off_i.size)
    sources: dict[str, set] = {}
    if not spot.any():
        return rate, sources
    from gpuwise.hardware.spot_risk import preemption_rate_per_hour

    per_off: dict[int, float] = {}
    for j in np.unique(off_i[spot]):
        risk = preemption_rate_per_hour(offs[j].example)
        per_off[int(j)] = float(risk.rate_per_hour)
        # "default: no <cloud> <gpu> trace; <where the default comes from>" -> one line per source
        src = risk.source.split("; ", 1)[-1] if risk.source.startswith("default") else risk.source
        proxy = "no trace of this class, stands in: " if risk.is_default else ""
        sources.setdefault(f"{proxy}{risk.rate_per_hour:.3g}/node-h from {src}", set()).add(offs[j].gpu)
    rate[spot] = [per_off[int(j)] for j in off_i[spot]]
    return rate, sources


def _market(catalog) -> list:
    """The catalog's own rows (before prices the user gave: plan.user_prices)."""
    return catalog.market if getattr(catalog, "market", None) is not None else catalog.offerings


def _assumptions(job: PlanJob, catalog, offs, cs: CandidateSet, sources: dict[str, set],
                 step_notes: list[str], checkpoint_note: str | None = None) -> list[str]:
    from gpuwise.hardware.catalog import catalog_assumptions

    clouds = sorted({o.cloud for o in offs})
    out = list(job.assumptions)
    out += catalog_assumptions(catalog, clouds)
    out.append("prices: cheapest zone of each region; cost = expected time x hourly price x nodes "
               "(Scavenger eq. 5), billed for the whole wall-clock time")
    if job.space.fixed_batch:
        rounded = sorted({o.global_batch for o in cs.options if o.batch_rounded})
        out.append(f"global batch fixed at {job.batch_range[0]}: kept exactly on every shape where a layout holds it"
                   + (f"; shapes where none does round it to {rounded} (batch~ rows, by at most "
                      f"{FIXED_BATCH_ROUNDING:.0%})" if rounded else ""))
    if len(cs):
        out.append(f"searched {len(offs)} offerings (cloud, region, instance) x {int(cs.nodes.min())}-"
                   f"{int(cs.nodes.max())} nodes x parallel plans (tp {list(job.tp)}, pp {list(job.pp)}, "
                   f"ZeRO {list(job.zero)}, cp {list(job.cp)}"
                   + (f", ZeRO-1 groups {list(job.zero_shard)}" if job.zero_shard != (0,) else "")
                   + f") x global batches {list(job.batches)} x micro-batches: "
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
    if not job.inter_node_gbps:   # per-node values set by node_network: one line instead of one per value
        step_notes = [n for n in step_notes if not n.startswith("inter-node bandwidth")] + [NODE_NETWORK_NOTE]
    out += [f"step time: {n}" for n in step_notes]
    if sources:
        out.append("spot preemption rate per GPU class: " + "; ".join(
            f"{', '.join(sorted(g))}: {s}" for s, g in sources.items()))
    return out
