"""Why the winner: how it compares with the best of every other GPU type, and what one node
count more or less would buy (marginal hours saved per extra dollar). Also the answer for an
infeasible job: which constraint binds, and the nearest feasible option."""

from __future__ import annotations

import numpy as np

from gpuwise.estimate.layouts import zero_shard_hint
from gpuwise.estimate.memory import cache_text
from gpuwise.hardware.gpus import get_gpu
from gpuwise.plan.candidates import CandidateSet


def _fmt_h(h: float) -> str:
    return f"{h:.1f} h" if h < 100 else f"{h:.0f} h"


def _fmt_usd(c: float) -> str:
    return f"${c:,.0f}" if abs(c) >= 100 else f"${c:,.2f}"


def _fmt_interval(h: float) -> str:
    """A checkpoint interval: '45 s', '31 min', '2.5 h' (never '0 min')."""
    s = h * 3600.0
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{h:.1f} h"


def _tradeoff(saved_h: float, extra_usd: float) -> str:
    """What one more or one less node buys, in units a reader can weigh: hours per $1,000 only when the
    extra cost is large enough for the ratio to mean something (a few cents more does not buy 200,000 h)."""
    if saved_h <= 0:
        return "no time saved" if extra_usd >= 0 else "and is also cheaper"
    if extra_usd <= 0:
        return "and is also cheaper"
    if extra_usd < 1000:
        return f"{saved_h:.1f} h saved for {_fmt_usd(extra_usd)} more"
    return f"{saved_h / extra_usd * 1000:.3g} h saved per extra $1,000"


def _short(cs: CandidateSet, r: int) -> str:
    off = cs.offerings[cs.off_idx[r]]
    return (f"{cs.gpus[r]} x {off.gpu} {'spot' if cs.spot[r] else 'on-demand'} ({cs.nodes[r]} x {off.instance_type}, "
            f"{off.cloud} {off.region}) at ${cs.node_price[r] / off.gpus_per_node:.2f}/GPU-h: "
            f"{_fmt_h(cs.time_h[r])}, {_fmt_usd(cs.cost[r])}")


def _floor_text(cs: CandidateSet, r: int) -> str:
    f = cs.spot_floors[cs.offerings[cs.off_idx[r]].gpu]
    return (f"below the {f.gpu} spot floor ${f.floor_usd:.2f}/GPU-h; its median on-demand price is "
            f"${f.od_median:.2f}/GPU-h")


def price_notes(cs: CandidateSet, chosen: int, other: int | None, included: bool) -> list[str]:
    """Lines on the prices the choice rests on: an outlier spot price left out (or taken, with the pick
    without it), and a spot plan larger than one zone plausibly holds."""
    from gpuwise.hardware.spot_risk import zone_warning

    lines = []
    if not included and other is not None and other != chosen and cs.outlier[other]:
        lines.append(f"outlier price left out: {_short(cs, other)} would be cheaper, but its spot price is "
                     f"{_floor_text(cs, other)} (one catalog row; --include-outlier-prices plans on it)")
    if included and cs.outlier[chosen]:
        alt = f"; without outlier prices the pick is {_short(cs, other)}" if other is not None else ""
        lines.append(f"warning: the chosen spot price is an outlier, {_floor_text(cs, chosen)}{alt}")
    if cs.spot[chosen]:
        off = cs.offerings[cs.off_idx[chosen]]
        warn = zone_warning(int(cs.gpus[chosen]), off.gpu, off.spot_zone)
        if warn:
            lines.append("warning: " + warn)
    return lines


def _metric(cs: CandidateSet, objective: str) -> np.ndarray:
    return cs.time_h if objective == "time" else cs.cost


def explain(cs: CandidateSet, chosen: int, objective: str, mask: np.ndarray) -> list[str]:
    """Human sentences about the chosen row (mask: candidates that meet the constraints)."""
    opt = cs.options[cs.opt_idx[chosen]]
    off = cs.offerings[cs.off_idx[chosen]]
    lines = []
    per_gpu = cs.node_price[chosen] / off.gpus_per_node
    lines.append(
        f"{opt.gpus} x {opt.gpu} ({cs.nodes[chosen]} x {off.instance_type}, {off.cloud} {off.region}, "
        f"{'spot' if cs.spot[chosen] else 'on-demand'} at ${per_gpu:.2f}/GPU-h): {_fmt_h(cs.time_h[chosen])}, "
        f"{_fmt_usd(cs.cost[chosen])}; plan {opt.plan_label}, global batch {opt.global_batch} "
        + ("(ROUNDED from the spec's fixed batch: no layout of this shape holds it exactly) "
           if opt.batch_rounded else "") +
        f"(micro {opt.micro_batch} x accum {opt.grad_accum}), {opt.memory_required_gib:.1f} GiB/GPU needed "
        f"(allocated + CUDA context + NCCL; {cache_text(opt.memory_gib, get_gpu(opt.gpu).total_gib)})")
    # why this GPU: best alternative per other GPU type on the same objective
    metric = _metric(cs, objective)
    gpus = np.array([cs.offerings[i].gpu for i in cs.off_idx])
    for g in sorted(set(gpus[mask].tolist()) - {opt.gpu}):
        sel = np.flatnonzero(mask & (gpus == g))
        j = sel[np.argmin(metric[sel])]
        dt = cs.time_h[j] / cs.time_h[chosen] - 1
        dc = cs.cost[j] / cs.cost[chosen] - 1
        lines.append(f"why {opt.gpu}: best {g} option ({cs.gpus[j]} GPU{'s' if cs.gpus[j] > 1 else ''}, "
                     f"{'spot' if cs.spot[j] else 'on-demand'}) takes {_fmt_h(cs.time_h[j])} ({dt:+.0%}) "
                     f"and costs {_fmt_usd(cs.cost[j])} ({dc:+.0%})")
    # why this pricing: the same hardware shape under the other pricing, best offering
    other = mask & (cs.spot != cs.spot[chosen]) & (cs.opt_idx == cs.opt_idx[chosen])
    if other.any():
        sel = np.flatnonzero(other)
        j = sel[np.argmin(metric[sel])]
        word = "on-demand" if cs.spot[chosen] else "spot"
        lines.append(f"why {'spot' if cs.spot[chosen] else 'on-demand'}: the same {cs.gpus[j]} GPUs {word} "
                     f"({cs.offerings[cs.off_idx[j]].cloud} {cs.offerings[cs.off_idx[j]].region}) take "
                     f"{_fmt_h(cs.time_h[j])} and cost {_fmt_usd(cs.cost[j])}")
    # why this count: neighbours on the same offering and pricing
    same = np.flatnonzero((cs.off_idx == cs.off_idx[chosen]) & (cs.spot == cs.spot[chosen]))
    n0 = cs.nodes[chosen]
    smaller = same[cs.nodes[same] < n0]
    larger = same[cs.nodes[same] > n0]
    for j, word in ((smaller[np.argmax(cs.nodes[smaller])] if smaller.size else None, "fewer"),
                    (larger[np.argmin(cs.nodes[larger])] if larger.size else None, "more")):
        if j is None:
            continue
        lo, hi = (j, chosen) if word == "fewer" else (chosen, j)   # hi = the larger cluster
        saved_h = cs.time_h[lo] - cs.time_h[hi]
        extra = cs.cost[hi] - cs.cost[lo]
        rate = _tradeoff(saved_h, extra)
        verdict = "" if mask[j] else " (breaks a constraint)"
        lines.append(f"why {n0} node{'s' if n0 > 1 else ''}: {cs.nodes[hi]} nodes instead of {cs.nodes[lo]} "
                     f"changes time by {-saved_h:+.1f} h and cost by {extra:+,.2f} USD -> {rate}{verdict}")
    if cs.spot[chosen]:
        from gpuwise.hardware.spot_risk import preemption_rate_per_hour

        risk = preemption_rate_per_hour(off.example)
        whose = (f" (no {off.gpu} trace: the AWS V100 traces' rate stands in)" if risk.is_default
                 else f" ({off.gpu} traces)")
        lines.append(f"spot risk: {cs.preempt_rate[chosen]:.3f} preemptions per node-hour{whose} -> "
                     f"{cs.preemptions[chosen]:.1f} expected preemptions, checkpoint every "
                     f"{_fmt_interval(cs.ckpt_interval_h[chosen])} (Young/Daly); time p10-p90 "
                     f"{_fmt_h(cs.time_p10[chosen])}-{_fmt_h(cs.time_p90[chosen])}, cost "
                     f"{_fmt_usd(cs.cost_p10[chosen])}-{_fmt_usd(cs.cost_p90[chosen])}")
    return lines


def _fewest_gpus(cs: CandidateSet, job, limit: int = 1024) -> list[dict]:
    """Per allowed GPU type, the fewest GPUs on which some plan fits (the job's goodput object's memory
    question, `JobGoodput.fewest_fitting`: micro-batch 1, every layout), fewest first."""
    from gpuwise.hardware.gpus import get_gpu

    out = []
    for gpu in sorted({k[0] for k in cs.shapes}):
        gpn = max(k[1] for k in cs.shapes if k[0] == gpu)
        found = job.goodput.fewest_fitting(get_gpu(gpu), gpn, limit, micro_batch=1)
        if found is not None:
            out.append({"gpu": gpu, "gpus": found[0], "gpus_per_node": gpn})
    return sorted(out, key=lambda d: d["gpus"])


def infeasible(cs: CandidateSet, job, allowed: np.ndarray | None = None) -> dict:
    """Which constraint binds and the nearest feasible option, when no candidate meets them all
    (allowed: the rows that may be chosen at all, e.g. without outlier prices; default every row)."""
    if len(cs) == 0:
        reasons = {r.reason for r in cs.shapes.values()}
        if not cs.shapes:
            return {"binding": "offerings", "message": "no catalog offering matches the job's clouds, "
                    "regions and GPU types; widen constraints.clouds / --cloud or constraints.gpus / --gpu"}
        if reasons == {"memory"} or "memory" in reasons and "batch" not in reasons:
            nearest = _fewest_gpus(cs, job)
            hint = ""
            if nearest:
                hint = " Nearest feasible: " + "; ".join(f"{n['gpus']} x {n['gpu']}" for n in nearest) + \
                       " (fewest GPUs on which some plan fits, any parallel layout)."
            groups = zero_shard_hint(job.space)      # the spec's ZeRO-1 groups, if they left ZeRO 1 out
            return {"binding": "memory",
                    "message": "the job does not fit in memory on any allowed GPU type with up to "
                               f"{job.max_gpus or 'the default maximum of'} GPUs and the allowed "
                               "parallel plans; allow more GPUs (--max-gpus, constraints.max_gpus), larger "
                               "GPUs (--gpu), more tensor/pipeline parallelism or ZeRO-3, or recompute." + hint
                               + (f" {groups}" if groups else ""),
                    "nearest": {"min_gpus": nearest} if nearest else None}
        return {"binding": "batch", "message": "no parallel plan reaches an allowed global batch on the "
                "allowed GPU counts; widen training.global_batch", "nearest": None}
    allowed = allowed if allowed is not None and allowed.any() else np.ones(len(cs), bool)
    hourly_ok = allowed & (cs.hourly <= job.max_usd_per_hour if job.max_usd_per_hour else True)
    dl_ok = cs.time_p90 <= job.deadline_hours if job.deadline_hours else np.ones(len(cs), bool)   # met at p90
    bud_ok = cs.cost <= job.budget_usd if job.budget_usd else np.ones(len(cs), bool)
    out: dict = {"binding": [], "nearest": {}}
    msgs = []
    if not hourly_ok.any():
        out["binding"].append("max_usd_per_hour")
        need = float(cs.hourly[allowed].min())
        out["nearest"]["min_usd_per_hour"] = need
        msgs.append(f"the cheapest cluster costs {_fmt_usd(need)}/h > max_usd_per_hour "
                    f"{_fmt_usd(job.max_usd_per_hour)}")
    base = hourly_ok
    if job.deadline_hours and not (base & dl_ok).any():
        fastest = float(cs.time_p90[base].min()) if base.any() else float(cs.time_p90[allowed].min())
        out["binding"].append("deadline")
        out["nearest"]["min_deadline_hours"] = fastest
        msgs.append(f"the fastest option takes {_fmt_h(fastest)} at p90 > deadline {_fmt_h(job.deadline_hours)}")
    if job.budget_usd and not (base & bud_ok).any():
        cheapest = float(cs.cost[base].min()) if base.any() else float(cs.cost[allowed].min())
        out["binding"].append("budget")
        out["nearest"]["min_budget_usd"] = cheapest
        msgs.append(f"the cheapest option costs {_fmt_usd(cheapest)} > budget {_fmt_usd(job.budget_usd)}")
    if not out["binding"]:   # each constraint alone is satisfiable, together they are not
        out["binding"] = ["deadline", "budget"]
        m = base & dl_ok
        need = float(cs.cost[m].min())
        within = base & bud_ok
        fastest = float(cs.time_p90[within].min())
        out["nearest"] = {"min_budget_usd": need, "min_deadline_hours": fastest}
        msgs.append(f"deadline and budget conflict: meeting the deadline costs at least {_fmt_usd(need)} "
                    f"(budget {_fmt_usd(job.budget_usd)}); within the budget the fastest takes "
                    f"{_fmt_h(fastest)} (deadline {_fmt_h(job.deadline_hours)})")
    out["message"] = "; ".join(msgs) + ". Raise the binding limit to the nearest feasible value shown."
    return out
