"""`plan`: one job in, ranked rental configurations out (candidates -> constraints -> objective)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwise.plan.candidates import CandidateSet, generate
from gpuwise.plan.choose import COST_TIE, DEFAULT_CONFIDENCE, OBJECTIVES, choose
from gpuwise.plan.explain import explain, infeasible, price_notes
from gpuwise.plan.offerings import outlier_rule
from gpuwise.plan.job import PlanJob
from gpuwise.plan.pareto import pareto_front
from gpuwise.plan.knee import knee_of_front


@dataclass
class PlanResult:
    job: PlanJob
    objective: str
    candidates: CandidateSet
    ranked: list[int]               # candidate rows shown, best first (deduplicated)
    chosen: int | None              # row of the chosen candidate
    pareto: list[int]               # rows on the time/cost Pareto front (fastest first)
    knee: int | None                # row of the front's knee
    explanation: list[str]
    infeasible: dict | None
    assumptions: list[str] = field(default_factory=list)
    alternative: int | None = None  # the choice with outlier spot prices in (default) or out (included)
    considered: np.ndarray | None = None   # bool per candidate: the rows the choice was made over
    include_outliers: bool = False


def _dedupe(cs: CandidateSet, rows: np.ndarray) -> list[int]:
    """Keep the first row of each (cloud, instance type, nodes, pricing): other regions at the
    same or a higher price add nothing to a ranking."""
    seen, out = set(), []
    for r in rows.tolist():
        off = cs.offerings[cs.off_idx[r]]
        key = (off.cloud, off.instance_type, int(cs.nodes[r]), bool(cs.spot[r]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _pick(cs: CandidateSet, job: PlanJob, objective: str, ok: np.ndarray):
    """(rows meeting `ok`, Pareto front rows, knee row, chosen row or None)."""
    rows = np.flatnonzero(ok)
    t, c = cs.time_h[rows], cs.cost[rows]
    front_pos = pareto_front(t, c) if rows.size else np.zeros(0, np.int64)   # positions in rows
    front = rows[front_pos]
    knee = int(front[knee_of_front(cs.time_h[front], cs.cost[front])]) if front.size else None
    chosen = None
    if rows.size:
        prob = cs.deadline_prob[rows] if objective == "deadline" else None
        k = choose(t, c, objective, deadline_prob=prob, front=front_pos, cost_tie=COST_TIE, nodes=cs.nodes[rows])
        chosen = None if k is None else int(rows[k])
    return rows, front, knee, chosen


def _order(cs: CandidateSet, objective: str, rows: np.ndarray, front: np.ndarray, chosen: int) -> np.ndarray:
    t, c = cs.time_h[rows], cs.cost[rows]
    if objective == "time":
        return rows[np.lexsort((c, t))]
    if objective == "knee":
        return np.concatenate(([chosen], front[front != chosen], rows[np.lexsort((t, c))]))
    order = rows[np.lexsort((t, c))]
    if objective == "deadline":
        meets = cs.deadline_prob[order] >= DEFAULT_CONFIDENCE
        order = np.concatenate((order[meets], order[~meets]))
    return order


def plan(job: PlanJob, catalog, objective: str = "cost", top: int = 10,
         include_outliers: bool = False) -> PlanResult:
    """Generate, filter by the constraints, choose by `objective`, explain. Spot prices far below their GPU
    type's (offerings.spot_outliers) are left out of the choice unless `include_outliers`; either way the
    explanation says what the other choice would be."""
    if objective not in OBJECTIVES:
        raise ValueError(objective)
    if objective == "deadline" and not job.deadline_hours:   # before the catalog-wide search
        from gpuwise.errors import InputError

        raise InputError("--objective", "deadline", "the job has no deadline_hours; set it in the job "
                         "YAML or use --objective cost|time|knee")
    cs = generate(job, catalog)
    ok = cs.ok if include_outliers else cs.ok & ~cs.outlier
    rows, front, knee, chosen = _pick(cs, job, objective, ok)
    if chosen is None:
        info = infeasible(cs, job, None if include_outliers else ~cs.outlier)
        if objective == "deadline" and rows.size:
            info = {"binding": ["deadline"], "nearest": {"min_deadline_hours": float(cs.time_p90[rows].min())},
                    "message": f"no candidate finishes within {job.deadline_hours:g} h with probability "
                               f">= {DEFAULT_CONFIDENCE:.0%}; the best p90 time is {cs.time_p90[rows].min():.1f} h"}
        return PlanResult(job, objective, cs, [], None, front.tolist(), knee, [], info, cs.assumptions,
                          considered=ok, include_outliers=include_outliers)
    ranked = _dedupe(cs, np.concatenate(([chosen], _order(cs, objective, rows, front, chosen))))[:max(top, 1)]
    assumptions = list(cs.assumptions)
    if objective == "deadline":
        assumptions.append(f"deadline objective: cheapest candidate finishing within {job.deadline_hours:g} h "
                           f"with probability >= {DEFAULT_CONFIDENCE:.0%} (spot: preemption model)")
    if objective in ("cost", "deadline"):
        assumptions.append(f"costs within {COST_TIE:.0%} of the cheapest are a tie: the fastest of them is chosen, "
                           "then the one with fewer, larger nodes")
    other = _pick(cs, job, objective, cs.ok & ~cs.outlier if include_outliers else cs.ok)[3]
    notes = price_notes(cs, chosen, other, include_outliers)
    assumptions.append(outlier_rule() + (" (included: --include-outlier-prices)" if include_outliers
                                         else "; such offerings are left out of the choice"))
    return PlanResult(job, objective, cs, ranked, chosen, front.tolist(), knee,
                      explain(cs, chosen, objective, ok) + notes, None, assumptions, other, ok, include_outliers)


def candidate_dict(cs: CandidateSet, r: int) -> dict:
    """One candidate as JSON-ready fields."""
    off = cs.offerings[cs.off_idx[r]]
    opt = cs.options[cs.opt_idx[r]]
    spot = bool(cs.spot[r])

    def f(x, nd=4):
        x = float(x)
        return None if not np.isfinite(x) else round(x, nd)

    return {
        "cloud": off.cloud, "region": off.region, "zone": off.spot_zone if spot else off.zone,
        "instance_type": off.instance_type, "gpu": off.gpu, "gpus_per_node": off.gpus_per_node,
        "nodes": int(cs.nodes[r]), "gpus": int(cs.gpus[r]), "spot": spot,
        "hourly_usd": f(cs.hourly[r]), "node_hourly_usd": f(cs.node_price[r]),
        "usd_per_gpu_hour": f(cs.node_price[r] / off.gpus_per_node),
        "time_hours": f(cs.time_h[r]), "time_hours_p10": f(cs.time_p10[r]), "time_hours_p90": f(cs.time_p90[r]),
        "cost_usd": f(cs.cost[r], 2), "cost_usd_p10": f(cs.cost_p10[r], 2), "cost_usd_p90": f(cs.cost_p90[r], 2),
        "global_batch_size": opt.global_batch, "micro_batch": opt.micro_batch, "grad_accum": opt.grad_accum,
        # the spec's fixed batch could not be held exactly on this shape (no layout divides it): rounded
        "global_batch_rounded": bool(opt.batch_rounded),
        "plan": opt.plan_label, "tp": opt.plan.tp, "pp": opt.plan.pp, "cp": opt.plan.cp, "dp": opt.plan.dp,
        "zero": opt.plan.zero, "zero_shard": opt.plan.zero_shard, "step_time_s": f(opt.step_time_s), "mfu": f(opt.mfu) if opt.mfu is not None else None,
        # the host's dispatch floor under the step (None: not modelled); step_time_s == host_s: host-bound
        "host_s": f(opt.host_s, 6) if opt.host_s is not None else None,
        "memory_gib_per_gpu": f(opt.memory_gib, 2), "memory_required_gib_per_gpu": f(opt.memory_required_gib, 2),
        "train_hours_no_preemption": f(opt.train_hours),
        "expected_preemptions": f(cs.preemptions[r], 2),
        "preemption_rate_per_node_hour": f(cs.preempt_rate[r]) if spot else None,
        "checkpoint_interval_hours": f(cs.ckpt_interval_h[r]) if spot else None,
        "deadline_probability": f(cs.deadline_prob[r], 3),
        "catalog_date": off.catalog_date,
        "spot_price_outlier": bool(cs.outlier[r]) if cs.outlier is not None else False,
    }


def to_json(res: PlanResult) -> dict:
    """candidates (ranked rows, then Pareto rows not already listed), chosen, pareto (indices into
    candidates), knee, explanation, infeasible, assumptions."""
    cs = res.candidates
    rows = list(res.ranked)
    for r in res.pareto:
        if r not in rows:
            rows.append(r)
    pos = {r: i for i, r in enumerate(rows)}
    return {
        "job": res.job.name,
        "objective": res.objective,
        "candidates": [candidate_dict(cs, r) for r in rows],
        "chosen": candidate_dict(cs, res.chosen) if res.chosen is not None else None,
        "chosen_index": pos.get(res.chosen) if res.chosen is not None else None,
        "pareto": [pos[r] for r in res.pareto],
        "knee_index": pos.get(res.knee) if res.knee is not None else None,
        "candidates_evaluated": cs.evaluated,
        "candidates_feasible": int(cs.ok.sum()),
        "explanation": res.explanation,
        "infeasible": res.infeasible,
        "assumptions": res.assumptions,
        # the choice the other way round: with outlier spot prices when they are left out, and without them
        # when --include-outlier-prices took them in (None: the same row, or nothing feasible)
        "alternative_with_outlier_prices" if not res.include_outliers else "alternative_without_outlier_prices":
            candidate_dict(cs, res.alternative) if res.alternative is not None and res.alternative != res.chosen
            else None,
    }
