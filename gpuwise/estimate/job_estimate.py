"""One job on one offering: step time, throughput, MFU, time to target and cost -- what
`gpuwise estimate` prints. Memory, step time, checkpoint size and steps to target come from the single
job performance model (``gpuwise.estimate.performance.JobPerformance``); this module adds
checkpoint/preemption overheads and catalog prices. Every choice made is listed in ``assumptions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuwise.errors import InputError
from gpuwise.estimate.cost import PriceQuote, cheapest_offering, training_cost
from gpuwise.estimate.performance import JobPerformance
from gpuwise.estimate.preemption import (DEFAULT_RATE_PER_NODE_HOUR, DEFAULT_RATE_SOURCE, checkpoint_seconds,
                                         spot_time, time_with_checkpoints)
from gpuwise.estimate.stat_efficiency import NoiseModel
from gpuwise.hardware.types import GpuSpec

ON_DEMAND_CHECKPOINT_MIN = 60.0   # default checkpoint interval without preemptions (minutes)


@dataclass
class Amount:
    """Training amount and its statistical-efficiency model (None = unknown amount)."""

    noise: NoiseModel | None
    description: str


def price_for(gpu: GpuSpec, gpus_per_node: int, spot: bool, price_per_gpu_hour: float | None) -> PriceQuote | None:
    if price_per_gpu_hour is not None:
        if price_per_gpu_hour < 0:
            raise InputError("--price", price_per_gpu_hour, "give a price >= 0 USD per GPU-hour")
        return PriceQuote(price_per_gpu_hour * gpus_per_node, gpus_per_node,
                          f"--price ${price_per_gpu_hour:g} per GPU-hour", spot)
    return cheapest_offering(gpu.name, gpus_per_node, spot)


def spot_rate(quote: PriceQuote | None) -> tuple[float, str]:
    if quote is not None and quote.offering is not None:
        try:
            from gpuwise.hardware.spot_risk import preemption_rate_per_hour

            risk = preemption_rate_per_hour(quote.offering)
            return float(risk.rate_per_hour), f"{risk.rate_per_hour:.3g} preemptions per node-hour ({risk.source})"
        except ImportError:
            pass
    return DEFAULT_RATE_PER_NODE_HOUR, DEFAULT_RATE_SOURCE


def estimate(perf: JobPerformance, amount: Amount, spot: bool, price_per_gpu_hour: float | None,
             checkpoint_write_gbps: float = 1.0, checkpoint_interval_min: float | None = None,
             restart_min: float = 10.0, deadline_hours: float | None = None,
             budget_usd: float | None = None, notes: list[str] = ()) -> dict[str, Any]:
    """Everything `gpuwise estimate` reports, as a JSON-ready dict (``notes``: the caller's choices,
    e.g. how the batch was picked, added to the assumptions)."""
    gpu, gpus_per_node, mem = perf.gpu, perf.gpus_per_node, perf.memory
    out = _step_json(perf)
    assumptions = list(perf.step.assumptions) + list(notes) + _stack_lines(perf)
    if not mem.fits(gpu):
        assumptions.append(f"DOES NOT FIT: {mem.shortfall_text(gpu)}")

    quote = price_for(gpu, gpus_per_node, spot, price_per_gpu_hour)
    if quote is not None:
        out["price"] = {"usd_per_gpu_hour": quote.usd_per_gpu_hour,
                        "usd_per_node_hour": quote.usd_per_gpu_hour * gpus_per_node,
                        "spot": spot, "source": quote.source}
        assumptions.append(f"price: {quote.source}; billed per node of {gpus_per_node} GPU(s)")
    elif price_per_gpu_hour is None:
        assumptions.append(f"no price: the catalog has no {'spot ' if spot else ''}offering with {gpu.name}; "
                           "pass --price USD_PER_GPU_HOUR")

    if amount.noise is not None:
        out.update(_time_to_target(perf, amount, spot, quote, checkpoint_write_gbps, checkpoint_interval_min,
                                   restart_min, assumptions))
        if deadline_hours is not None:
            out["meets_deadline"] = out["time_to_target_hours"] <= deadline_hours
        if budget_usd is not None and "cost_usd" in out:
            out["within_budget"] = out["cost_usd"] <= budget_usd
    else:
        assumptions.append("no training amount given: time and cost per step only (add --tokens or a spec amount)")
    out["assumptions"] = assumptions
    return out


def _step_json(perf: JobPerformance) -> dict[str, Any]:
    """The layout, step time, throughput and memory of one job: what holds without a training amount."""
    model, cfg, gpu, gpus_per_node = perf.model, perf.cfg, perf.gpu, perf.gpus_per_node
    est, mem = perf.step, perf.memory
    out: dict[str, Any] = {
        "model": model.name, "gpu": gpu.name, "gpus": est.gpus, "nodes": est.nodes, "gpus_per_node": gpus_per_node,
        "plan": {"dp": cfg.plan.dp, "tp": cfg.plan.tp, "pp": cfg.plan.pp, "cp": cfg.plan.cp, "zero": cfg.plan.zero,
                 "zero_shard": cfg.plan.zero_shard},
        "precision": cfg.precision, "recompute": cfg.recompute,
        "micro_batch": cfg.micro_batch, "grad_accum": cfg.grad_accum, "global_batch": cfg.global_batch(),
        "step_time_s": est.step_time_s, "compute_s": est.compute_s, "comm_s": est.comm_s,
        "bubble_s": est.bubble_s, "optimizer_s": est.optimizer_s, "host_s": est.host_s, "host_bound": est.host_bound, "mfu": est.mfu,
        "samples_per_second": est.samples_per_s, "samples_per_second_per_gpu": est.samples_per_s_per_gpu,
    }
    if model.sample_unit == "token":
        out["seq_len"] = cfg.seq_len
        out["tokens_per_second"] = est.tokens_per_s
        out["tokens_per_second_per_gpu"] = est.tokens_per_s_per_gpu
    out["memory_gib"] = {k: round(v, 4) for k, v in mem.fit_gib(gpu).items()}   # per GPU: what `fits` compares
    out["fits"] = bool(mem.fits(gpu))
    out["stack"] = cfg.stack
    return out


def _time_to_target(perf: JobPerformance, amount: Amount, spot: bool, quote, checkpoint_write_gbps: float,
                    checkpoint_interval_min: float | None, restart_min: float, assumptions: list[str]) -> dict[str, Any]:
    """Steps to the target, wall time with checkpoints (and, on spot, preemptions) and what it costs."""
    cfg, est, gpus_per_node = perf.cfg, perf.step, perf.gpus_per_node
    nodes = est.nodes
    steps = perf.steps_to_target if perf.noise is not None else float(amount.noise.steps(cfg.global_batch()))
    work_s = steps * est.step_time_s
    ckpt_gb = perf.checkpoint.gb
    c_s = checkpoint_seconds(ckpt_gb, checkpoint_write_gbps, nodes)
    assumptions.append(amount.description)
    assumptions.append(amount.noise.describe())
    assumptions.append(f"checkpoint {ckpt_gb:.3g} GB written at {checkpoint_write_gbps:g} GB/s per node "
                       f"({c_s:.0f} s); {perf.checkpoint.assumption}")
    out: dict[str, Any] = {"checkpoint_gb": ckpt_gb, "steps": steps}
    if spot:
        rate, src = spot_rate(quote)
        st = spot_time(work_s, rate, nodes, c_s, restart_min * 60.0,
                       None if checkpoint_interval_min is None else checkpoint_interval_min * 60.0, src)
        assumptions += st.assumptions
        hours = st.expected_s / 3600.0
        out["time_to_target_hours"] = hours
        out["time_to_target_hours_p10"] = st.p10_s / 3600.0
        out["time_to_target_hours_p50"] = st.p50_s / 3600.0
        out["time_to_target_hours_p90"] = st.p90_s / 3600.0
        out["preemption"] = {"rate_per_job_hour": st.rate_per_hour, "expected_preemptions": st.expected_preemptions,
                             "checkpoint_interval_min": st.interval_s / 60.0, "checkpoint_s": c_s,
                             "restart_min": restart_min}
    else:
        interval = (checkpoint_interval_min or ON_DEMAND_CHECKPOINT_MIN) * 60.0
        hours = time_with_checkpoints(work_s, c_s, interval) / 3600.0
        assumptions.append(f"on-demand: no preemptions; checkpoint every {interval / 60:.0f} min")
        out["time_to_target_hours"] = hours
    out["compute_hours"] = work_s / 3600.0
    if quote is not None:
        node_price = quote.usd_per_gpu_hour * gpus_per_node
        out["cost_usd"] = training_cost(hours, node_price, nodes)
        if spot:
            out["cost_usd_p10"] = training_cost(out["time_to_target_hours_p10"], node_price, nodes)
            out["cost_usd_p90"] = training_cost(out["time_to_target_hours_p90"], node_price, nodes)
        out["gpu_hours"] = hours * est.gpus
    return out


def _stack_lines(perf) -> list[str]:
    """The stack's defaults and the levers in effect (memory and step time both follow them)."""
    from gpuwise.estimate.levers import lever_notes
    from gpuwise.workload.stacks import stack_row

    if not perf.model.is_transformer:
        return [stack_row(perf.cfg.stack).describe()]
    return [stack_row(perf.cfg.stack).describe(), *lever_notes(perf.cfg, perf.memory.trainable_params)]
