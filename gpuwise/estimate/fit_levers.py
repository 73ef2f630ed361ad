"""How to make a training configuration fit a GPU: single changes ("levers"), each with its memory from
the one memory entry point (`performance.memory_of`), never a second formula.

Levers, in the order listed (cheapest in what they cost the run first): full recompute (about one more
forward pass of compute), an 8-bit optimizer (quantised Adam states), optimizer offload (host memory,
slower steps), LoRA (trains adapters only: a different training run), ZeRO-3 over more GPUs (pays for GPUs
and their network), and a larger GPU. Each lever is applied alone to the given configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.training import TrainingConfig

LORA_RANK = 16                      # the rank a LoRA lever uses (a common default, e.g. PEFT examples use 8-64)
ZERO3_GPUS = (2, 4, 8, 16, 32, 64)  # data-parallel widths tried for ZeRO-3


@dataclass(frozen=True)
class Lever:
    name: str                   # e.g. "ZeRO-3 over 8 GPUs"
    cost: str                   # what it costs the run, in words
    required_gib: float         # memory.required per GPU with the lever
    fits: tuple[str, ...]       # GPUs (of those asked about that do not fit now) it makes fit
    config: TrainingConfig


def _variants(spec, cfg: TrainingConfig):
    """(name, cost, config) of each single change that applies to `cfg`."""
    out = []
    if spec.is_transformer and cfg.recompute != "full":
        out.append(("full activation recompute", "about 1/3 more compute per step", replace(cfg, recompute="full")))
    if cfg.optimizer in ("adamw", "adam") and cfg.lora_rank == 0:
        out.append(("8-bit optimizer (adamw-8bit)", "quantised optimizer states", replace(cfg, optimizer="adamw-8bit")))
    if not cfg.offload_optimizer and cfg.optimizer != "sgd":
        out.append(("optimizer offload to host memory", "slower steps (optimizer on the CPU, PCIe transfers)",
                    replace(cfg, offload_optimizer=True)))
    if spec.is_transformer and cfg.lora_rank == 0:
        out.append((f"LoRA rank {LORA_RANK}", "trains adapters only (a different fine-tuning run)",
                    replace(cfg, lora_rank=LORA_RANK)))
    return [v for v in out if _runnable(spec, v[2])]


def _runnable(spec, cfg: TrainingConfig) -> bool:
    """A lever the configuration's other levers allow (e.g. no optimizer offload under FSDP CPU offload, which
    already keeps the states on the host): the rule that refuses the same flags on the command line."""
    from gpuwise.errors import InputError
    from gpuwise.estimate.levers import check_levers

    try:
        check_levers(cfg, spec.is_transformer)
    except InputError:
        return False
    return True


def _zero3(cfg: TrainingConfig, n: int) -> TrainingConfig:
    p = cfg.plan
    return replace(cfg, plan=replace(p, dp=p.dp * n, zero=3, zero_shard=0))   # FSDP shards over all of dp


def fit_levers(spec, cfg: TrainingConfig, gpus: list[GpuSpec], catalog_gpus: list[GpuSpec]) -> list[Lever]:
    """Levers that make `cfg` fit at least one of `gpus` it does not fit now (empty if it fits them all).

    catalog_gpus: the GPUs a larger one may be taken from (smallest that fits as is)."""
    from gpuwise.estimate.performance import memory_of

    est_now = memory_of(spec, cfg)
    miss = [g for g in gpus if not est_now.fits(g)]
    if not miss:
        return []
    gib = 2 ** 30
    out = []
    now = est_now.required
    for name, cost, c in _variants(spec, cfg):
        est = memory_of(spec, c)
        if est.required >= now:
            continue            # saves nothing here (e.g. an 8-bit optimizer whose states are on the host)
        out.append(Lever(name, cost, est.required / gib, tuple(g.name for g in miss if est.fits(g)), c))
    left = set(g.name for g in miss)
    for n in ZERO3_GPUS:   # the smallest widths that make another GPU fit
        c = _zero3(cfg, n)
        est = memory_of(spec, c)
        newly = tuple(g.name for g in miss if g.name in left and est.fits(g))
        if newly:
            left -= set(newly)
            out.append(Lever(f"ZeRO-3 over {c.plan.gpus} GPUs", f"{n}x the GPUs, weights gathered over their network",
                             est.required / gib, newly, c))
        if not left:
            break
    est = est_now
    bigger = sorted((g for g in catalog_gpus if est.fits(g)), key=lambda g: (g.memory_gib, g.name))
    if bigger:
        g = bigger[0]
        out.append(Lever(f"a larger GPU: {g.name} ({g.memory_gib:g} GB)", "the smallest GPU in the table that "
                         "holds it as is", est.required / gib, (g.name,), cfg))
    return out
