"""Which GPU types can hold a training job, how many of each, and with what parallel plan.

For each GPU type: the fewest GPUs on which some plan fits (the job's goodput object's memory
question, `JobGoodput.fewest_fitting`) and the best-ranked plan on that count. Types are ranked by GPU count, then by the
plan's communication/recompute proxy, then by device memory (a smaller part is usually cheaper);
prices are the planner's business (gpuwise plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from gpuwise.estimate.feasible_plans import plan_cost, stack_gpu_limit
from gpuwise.estimate.goodput import JobGoodput
from gpuwise.estimate.memory import MemoryEstimate
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig


@dataclass(frozen=True)
class GpuFit:
    """The answer for one GPU type."""

    gpu: GpuSpec
    gpus: int | None                    # fewest GPUs; None if nothing fits on max_gpus
    config: TrainingConfig | None       # best-ranked plan on that count
    memory: MemoryEstimate | None
    alternatives: int = 0               # other plans that fit on the same count
    reason: str = ""                    # why nothing fits


def fit_gpus(model: ModelSpec | str, cfg: TrainingConfig, gpus: list[GpuSpec], max_gpus: int = 1024,
             gpus_per_node: int = 8, recompute: str | None = None,
             on_progress: Callable[[int, Optional[int]], None] | None = None) -> list[GpuFit]:
    """Ranked GpuFit per GPU type. recompute: restrict plans to one recompute mode (None = any);
    on_progress(done, total) is called after each GPU type (the CLI draws a progress bar with it)."""
    good = JobGoodput.for_config(model, cfg)
    max_gpus = stack_gpu_limit(cfg, max_gpus)          # a one-GPU stack (stacks.csv gpus) searches one GPU
    out = []
    for i, gpu in enumerate(gpus):
        if on_progress is not None:
            on_progress(i, len(gpus))
        found = good.fewest_fitting(gpu, gpus_per_node, max_gpus)
        plans = [] if found is None else [(c, m) for c, m in found[1] if recompute in (None, c.recompute)]
        if found is not None and not plans and recompute is not None:
            # the fewest count has no plan with this recompute mode: search further up
            for n in range(found[0] + 1, max_gpus + 1):
                plans = [(c, m) for c, m in good.fitting_plans(gpu, n, gpus_per_node) if c.recompute == recompute]
                if plans:
                    found = (n, plans)
                    break
        if not plans:
            out.append(GpuFit(gpu, None, None, None, 0, f"does not fit on {max_gpus} x {gpu.name}"))
            continue
        c, m = plans[0]
        out.append(GpuFit(gpu, found[0], c, m, len(plans) - 1))
    if on_progress is not None:
        on_progress(len(gpus), len(gpus))
    fitted = sorted((f for f in out if f.gpus is not None),
                    key=lambda f: (f.gpus, plan_cost(f.config), f.gpu.memory_gib, f.gpu.name))
    return fitted + [f for f in out if f.gpus is None]
