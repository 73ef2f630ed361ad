"""The planner's view of a job: the goodput object of what it trains, and what it may rent."""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.errors import InputError
from gpuwise.estimate.goodput import JobGoodput
from gpuwise.estimate.job_space import JobSpace


@dataclass(frozen=True)
class PlanJob:
    """The job's goodput object plus the rental constraints, already validated."""

    goodput: JobGoodput               # layout/batch search, memory, step time, checkpoint (shared with every caller)
    clouds: list[str]
    regions: list[str]
    gpus: list[str]
    max_gpus: int | None
    spot: bool
    deadline_hours: float | None
    budget_usd: float | None
    max_usd_per_hour: float | None
    checkpoint_interval_h: float | None

    # what the job trains and may vary: the goodput object's search space
    @property
    def space(self) -> JobSpace:
        return self.goodput.space

    name = property(lambda self: self.space.name)
    model = property(lambda self: self.space.model)
    base = property(lambda self: self.space.base)
    noise = property(lambda self: self.space.noise)
    batches = property(lambda self: self.space.batches)
    batch_range = property(lambda self: self.space.batch_range)
    micro_batches = property(lambda self: self.space.micro_batches)
    tp = property(lambda self: self.space.tp)
    pp = property(lambda self: self.space.pp)
    cp = property(lambda self: self.space.cp)
    zero = property(lambda self: self.space.zero)
    zero_shard = property(lambda self: self.space.zero_shard)
    checkpoint_gb = property(lambda self: self.space.checkpoint_gb)
    checkpoint_write_gbps = property(lambda self: self.space.checkpoint_write_gbps)
    tokens_per_sample = property(lambda self: self.space.tokens_per_sample)
    inter_node_gbps = property(lambda self: self.space.inter_node_gbps)
    assumptions = property(lambda self: list(self.space.assumptions))
    restart_h = property(lambda self: self.space.restart_s / 3600.0)


def from_jobspec(spec, *, clouds: list[str] | None = None, gpus: list[str] | None = None,
                 spot: bool | None = None, max_gpus: int | None = None, require_amount: bool = True,
                 inter_node_gbps: float | None = None) -> PlanJob:
    """Build the planner's job from a validated JobSpec; CLI flags override the spec's constraints.
    ``require_amount=False`` (`gpuwise estimate`): a spec without a training amount ranks plans by
    time per sample (steps = 1 sample / global batch), and says so."""
    if max_gpus is not None and max_gpus < 1:
        raise InputError("--max-gpus", max_gpus, "give at least 1")
    good = JobGoodput.from_jobspec(spec, require_amount=require_amount, inter_node_gbps=inter_node_gbps)
    c = spec.constraints
    ck = spec.checkpoint
    return PlanJob(
        goodput=good, clouds=list(clouds) if clouds else list(c.clouds), regions=list(c.regions),
        gpus=list(gpus) if gpus else list(c.gpus), max_gpus=max_gpus if max_gpus is not None else c.max_gpus,
        spot=c.spot if spot is None else spot, deadline_hours=spec.deadline_hours, budget_usd=spec.budget_usd,
        max_usd_per_hour=c.max_usd_per_hour,
        checkpoint_interval_h=(ck.interval_minutes / 60.0) if ck.interval_minutes else None)
