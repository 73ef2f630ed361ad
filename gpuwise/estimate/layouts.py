"""THE parallel layouts of a training job on a GPU count, and the rules that make one valid.

Both questions gpuwise asks of a job enumerate layouts here, and nowhere else:

- the goodput search (`layout_search.allowed_plans`, asked through `goodput.JobGoodput`): the fastest
  layout, micro-batch and global batch on a hardware shape, over the degrees the job spec allows;
- the memory question (`feasible_plans`, asked through `JobGoodput.fewest_fitting` / `fitting_plans`:
  `gpuwise fit-gpus`, `estimate`'s nearest feasible option, `plan`'s infeasibility hint): the fewest
  GPUs on which some layout fits at a fixed micro-batch, over every degree.

Validity rules (one copy, here): tensor parallelism stays inside a node (tp divides the node size) and
divides the attention heads and the key/value heads; pp divides the GPUs left by tp and is at most the
layer count; cp divides the GPUs left by tp and pp and the sequence length; dp takes the rest; models
that are not transformers are data-parallel only. ZeRO 1-3 only when dp > 1. Sequence parallelism
whenever tp > 1 (the Megatron-core / torchtitan default). Pipeline layouts run at least pp micro-batches
per step (grad_accum raised to pp), so stage 0 holds pp micro-batches in flight. Recompute variants,
lightest first: none / selective / full with eager attention, none / op / full with flash attention
(flash keeps no attention scores, so Megatron's selective recompute has nothing to drop; torchtitan's
op-level AC does). Memory is `performance.memory_of(...).fits(gpu)` for both.

How the two enumerations differed before they shared this module (table: docs/layout-unification.md):
deliberate -- the goodput search takes only the spec's tp/pp/ZeRO degrees and cp = 1 (a job spec has no
cp field; every cp of a large cluster would exceed the planner's time budget), keeps only the lightest
recompute variant that fits per (tp, pp, ZeRO) (heavier ones only save memory, never time), and ranks by
time to target over micro-batches and global batches; the memory question takes every degree (cp included),
keeps every variant that fits at the caller's micro-batch, and ranks by `feasible_plans.plan_cost`.
Accidental drift, now removed: the goodput search never tried Megatron's selective recompute with eager
attention (it jumped from none to full), although the memory question did; job specs always use flash
attention, so no goodput answer reachable from a spec changed. And the memory question gave models that are
not transformers the flash-attention recompute list (op/full variants of a CNN, same memory), now none only.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import gcd

from gpuwise.workload.training import ParallelPlan, TrainingConfig, with_changes

ZERO_STAGES = (0, 1, 2, 3)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def pipeline_limit(spec) -> int:
    """The most pipeline stages a model splits into: one layer per stage at least."""
    return max(spec.n_layers + spec.n_encoder_layers, 1)


def tp_ok(spec, tp: int, gpus_per_node: int | None) -> bool:
    """tp inside one node (None: any node size) and dividing the heads and key/value heads."""
    if not spec.is_transformer:
        return tp == 1
    node_ok = gpus_per_node is None or gpus_per_node % tp == 0
    return node_ok and spec.n_heads % tp == 0 and spec.n_kv_heads % tp == 0


def layouts(spec, seq_len: int, gpus: int, gpus_per_node: int | None, tp=None, pp=None, cp=(1,)
            ) -> Iterator[tuple[int, int, int, int]]:
    """(tp, pp, cp, dp) on exactly `gpus` GPUs, in the order of the degrees given (None: every valid
    degree, ascending). Non-transformers: dp only."""
    if not spec.is_transformer:
        if (tp is None or 1 in tp) and (pp is None or 1 in pp) and (cp is None or 1 in cp):
            yield 1, 1, 1, gpus
        return
    layers = pipeline_limit(spec)
    for t in divisors(gpus if gpus_per_node is None else gcd(gpus, gpus_per_node)) if tp is None else tp:
        if gpus % t or not tp_ok(spec, t, gpus_per_node):
            continue
        rest = gpus // t
        for p in divisors(rest) if pp is None else pp:
            if rest % p or p > layers:
                continue
            for c in divisors(rest // p) if cp is None else cp:
                if (rest // p) % c == 0 and seq_len % c == 0:
                    yield t, p, c, rest // (p * c)


def zero_stages(dp: int, allowed=ZERO_STAGES) -> tuple[int, ...]:
    """The ZeRO stages a layout is tried with: sharding needs data-parallel replicas."""
    return tuple(z for z in allowed if dp > 1 or z == 0)


def zero_groups(spec, dp: int, cp: int, zero: int, allowed=(0,)) -> tuple[int, ...]:
    """The hybrid ZeRO-1 shard groups a layout is tried with (ParallelPlan.zero_shard): with ZeRO 1 on a
    transformer, each allowed k that divides dp x cp (k = dp x cp, or 0, is the whole group: tried as 0);
    otherwise the whole group only."""
    n = dp * cp
    if zero != 1 or not spec.is_transformer:
        return (0,)
    # a group of all dp x cp ranks is the whole group (0); one that does not divide them cannot be formed
    return tuple(dict.fromkeys(0 if k == n else k for k in allowed if k == 0 or n % k == 0))


def groups_rule_out_zero1(spec, seq_len: int, gpus: int, gpus_per_node: int | None, tp, pp, cp, zero,
                          allowed) -> bool:
    """True when ZeRO 1 is allowed and no allowed hybrid group divides dp x cp on any layout of `gpus` GPUs, so
    the groups (job spec parallelism.zero_shard), not memory, leave ZeRO 1 out."""
    if 1 not in zero or 0 in allowed:
        return False
    return not any(zero_groups(spec, d, c, 1, allowed) for _, _, c, d in layouts(spec, seq_len, gpus, gpus_per_node,
                                                                                  tp, pp, cp) if d > 1)


def zero_shard_hint(space, gpus: int | None = None, gpus_per_node: int | None = None) -> str:
    """The infeasibility hint of a job space (estimate.job_space.JobSpace) whose hybrid ZeRO-1 groups
    (parallelism.zero_shard) leave out the whole group, or '' when they do not. On one shape of `gpus` GPUs
    (`estimate`), only where no group divides any layout's dp x cp there (groups_rule_out_zero1); with gpus None
    (`plan`, every shape), whenever the groups leave the whole group out. The one copy of this hint's test and words."""
    if 1 not in space.zero or 0 in space.zero_shard:
        return ""
    groups = list(space.zero_shard)
    if gpus is None:
        return (f"ZeRO 1 was tried only where a group of parallelism.zero_shard {groups} divides a layout's "
                "dp x cp; allow 0 to try the whole group.")
    if not groups_rule_out_zero1(space.model, space.base.seq_len, gpus, gpus_per_node, space.tp, space.pp, space.cp,
                                 space.zero, space.zero_shard):
        return ""
    return (f"parallelism.zero_shard {groups} divides no layout's dp x cp on {gpus} GPUs, so no ZeRO-1 plan was "
            "tried: allow 0 (the whole group) or a divisor")


def recompute_variants(spec, cfg: TrainingConfig) -> tuple[str, ...]:
    """The recompute policies a layout is tried with, lightest first (recompute only saves memory)."""
    if not spec.is_transformer:
        return ("none",)
    return ("none", "op", "full") if cfg.flash_attention else ("none", "selective", "full")


def layout_config(cfg: TrainingConfig, tp: int, pp: int, cp: int, dp: int, zero: int, recompute: str,
                  zero_shard: int = 0) -> TrainingConfig:
    """cfg on one layout: sequence parallel with tp, at least pp micro-batches per step."""
    plan = ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, sp=tp > 1, zero=zero, zero_shard=zero_shard)
    return with_changes(cfg, grad_accum=max(cfg.grad_accum, pp), recompute=recompute, plan=plan)
