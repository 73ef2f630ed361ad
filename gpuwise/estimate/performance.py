"""THE performance model of one training job on one hardware shape: the single entry point that the
`memory`, `fit-gpus` and `estimate` commands, the planner's candidates, the Frenzy policy, the rent
solver's speedups and the online search call (the searches through the job's goodput object,
`gpuwise.estimate.goodput`).

    perf = job_performance(model, cfg, gpu, gpus_per_node=8, nodes=None, noise=noise)
    perf.memory            MemoryEstimate   (gpuwise.estimate.memory.estimate_memory)
    perf.step              StepTimeEstimate (gpuwise.estimate.step_time.analytical_step_time)
    perf.checkpoint        Checkpoint       bytes written per checkpoint (below)
    perf.steps_to_target   optimizer steps at cfg's global batch (statistical efficiency, NoiseModel)
    perf.assumptions       what each of those assumes

Each part is computed on first use, so a memory-only caller pays for memory only. Also here, used by
every batch search in gpuwise: ``batch_configs`` (which (micro-batch, grad_accum) pairs are tried),
``best_of`` (the one that reaches the target soonest) and ``largest_micro_batch`` (the memory limit).

Conventions: ``grad_accum`` = micro-steps per optimizer step (TrainingConfig's meaning, everywhere);
global batch = data-parallel replicas x micro-batch x grad_accum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from gpuwise.estimate.lora import adapter_params
from gpuwise.estimate.memory import MemoryEstimate, estimate_memory, required_lower_bound
from gpuwise.estimate.model_states import state_semantics
from gpuwise.estimate.stat_efficiency import NoiseModel
from gpuwise.estimate.step_time import StepTimeEstimate, analytical_step_time, step_time_lower_bound
from gpuwise.hardware.types import GpuSpec
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import TrainingConfig


@dataclass(frozen=True)
class Checkpoint:
    """What one checkpoint writes (whole job, all ranks together)."""

    bytes: float
    assumption: str

    @property
    def gb(self) -> float:
        return self.bytes / 1e9


def checkpoint_size(model: ModelSpec, cfg: TrainingConfig) -> Checkpoint:
    """Stored weights + optimizer state of the trainable parameters, as the memory model keeps them
    (``model_states.state_semantics`` for the config's precision, optimizer and ZeRO stage): PyTorch
    autocast / FSDP2 with bf16-mixed + AdamW keep fp32 weights and moments, 4 + 8 = 12 bytes per
    parameter; DeepSpeed ZeRO-1/2 keep 16-bit weights plus fp32 master and moments, 2 + 12 = 14.
    LoRA/QLoRA write the adapters and their optimizer state only: the frozen base is re-read from its
    original files."""
    from gpuwise.workload.models import param_count

    sem = state_semantics(cfg.precision, cfg.optimizer, model.hidden if model.is_transformer else 0, cfg.plan.zero)
    per_param = sem.weights + sem.optimizer
    if cfg.lora_rank > 0:
        n = adapter_params(model, cfg.lora_rank, cfg.lora_targets, cfg.dora)
        what = f"LoRA adapters only ({n / 1e6:.3g}M parameters; the frozen base is not rewritten)"
    else:
        n = param_count(model)
        what = f"{n / 1e9:.3g}B parameters"
    return Checkpoint(n * per_param, f"checkpoint = stored weights + optimizer state ({cfg.precision}, {cfg.optimizer}, "
                                     f"{sem.framework} ZeRO-{cfg.plan.zero} accounting: {per_param:g} bytes per "
                                     f"parameter, as the memory model keeps them) of {what}")


def memory_of(model: ModelSpec, cfg: TrainingConfig, memoise: bool = True) -> MemoryEstimate:
    """Per-GPU peak memory (``JobPerformance.memory`` without building one: hot loops of searches).
    ``memoise`` False: for a caller that keeps each estimate itself (the layout search), not kept twice."""
    # without the GPU: estimate_memory memoises per (model, cfg), shared by every shape of a search
    return estimate_memory(model, cfg, memoise=memoise)


def memory_bound_of(model: ModelSpec, cfg: TrainingConfig) -> float:
    """Bytes that ``memory_of(model, cfg).required`` is at least, at a fraction of its cost (searches prune with it)."""
    return required_lower_bound(model, cfg)


def step_of(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, gpus_per_node: int = 8, nodes: int | None = None,
            inter_node_gbps: float | None = None) -> StepTimeEstimate:
    """Step time (``JobPerformance.step`` without building one: hot loops of searches)."""
    return analytical_step_time(model, cfg, gpu, gpus_per_node, nodes, inter_node_gbps)


def step_bound_of(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, memo: dict | None = None) -> float:
    """Seconds that ``step_of(model, cfg, gpu, ...).step_time_s`` is at least, on any node size and network,
    at a fraction of its cost (searches prune with it; ``step_time.step_time_lower_bound``, whose ``memo`` is
    the caller's for this model and GPU)."""
    return step_time_lower_bound(model, cfg, gpu, memo)


class JobPerformance:
    """Memory, step time, checkpoint and steps to target of one configuration on one hardware shape."""

    __slots__ = ("model", "cfg", "gpu", "gpus_per_node", "nodes", "inter_node_gbps", "noise", "_checkpoint_gb",
                 "_memory", "_step", "_checkpoint")

    def __init__(self, model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec | None, gpus_per_node: int = 8,
                 nodes: int | None = None, inter_node_gbps: float | None = None, noise: NoiseModel | None = None,
                 checkpoint_gb: float | None = None):
        self.model, self.cfg, self.gpu = model, cfg, gpu
        self.gpus_per_node = gpus_per_node
        self.nodes = nodes or max(1, math.ceil(cfg.plan.gpus / gpus_per_node))
        self.inter_node_gbps = inter_node_gbps
        self.noise = noise
        self._checkpoint_gb = checkpoint_gb   # given by the job spec (None: from the model)
        # parts computed on first use (plain attributes: functools.cached_property locks on 3.11)
        self._memory: MemoryEstimate | None = None
        self._step: StepTimeEstimate | None = None
        self._checkpoint: Checkpoint | None = None

    @property
    def memory(self) -> MemoryEstimate:
        if self._memory is None:
            self._memory = memory_of(self.model, self.cfg)
        return self._memory

    @property
    def fits(self) -> bool:
        return self.gpu is not None and self.memory.fits(self.gpu)

    @property
    def step(self) -> StepTimeEstimate:
        if self._step is None:
            if self.gpu is None:
                raise ValueError("step time needs a GPU type")
            self._step = step_of(self.model, self.cfg, self.gpu, self.gpus_per_node, self.nodes, self.inter_node_gbps)
        return self._step

    @property
    def checkpoint(self) -> Checkpoint:
        if self._checkpoint is None:
            self._checkpoint = (checkpoint_size(self.model, self.cfg) if self._checkpoint_gb is None else
                                Checkpoint(self._checkpoint_gb * 1e9, f"checkpoint {self._checkpoint_gb:g} GB (given)"))
        return self._checkpoint

    @property
    def steps_to_target(self) -> float | None:
        return None if self.noise is None else float(self.noise.steps(self.cfg.global_batch()))

    @property
    def time_to_target_s(self) -> float | None:
        steps = self.steps_to_target
        return None if steps is None else steps * self.step.step_time_s

    @property
    def assumptions(self) -> list[str]:
        """Memory, step-time, checkpoint and statistical-efficiency assumptions (parts not computed
        yet are computed now)."""
        out = list(self.memory.assumptions)
        if self.gpu is not None:
            g, m = self.gpu, self.memory
            out.append(m.fit_text(g))
            out += self.step.assumptions
        out.append(self.checkpoint.assumption)
        if self.noise is not None:
            out.append(self.noise.describe())
        return out


def job_performance(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec | None, gpus_per_node: int = 8,
                    nodes: int | None = None, inter_node_gbps: float | None = None,
                    noise: NoiseModel | None = None, checkpoint_gb: float | None = None) -> JobPerformance:
    """The single entry point (see the module docstring). ``gpu`` None: memory and checkpoint only."""
    return JobPerformance(model, cfg, gpu, gpus_per_node, nodes, inter_node_gbps, noise, checkpoint_gb)


# ------------------------------------------------------------------ the one batch search

@dataclass(frozen=True)
class BatchGrid:
    """Candidate (micro-batch, grad_accum) pairs for ``replicas`` data-parallel replicas."""

    replicas: int
    pairs: tuple[tuple[int, int], ...]    # (per-replica micro-batch, micro-steps per optimizer step)

    @property
    def micro(self) -> np.ndarray:
        return np.array([p[0] for p in self.pairs], np.int64)

    @property
    def grad_accum(self) -> np.ndarray:
        return np.array([p[1] for p in self.pairs], np.int64)

    @property
    def global_batch(self) -> np.ndarray:
        return self.replicas * self.micro * self.grad_accum

    def __len__(self) -> int:
        return len(self.pairs)


@lru_cache(maxsize=8192)   # the planner asks the same (replicas, micro-batch, floor) for many shapes
def batch_configs(replicas: int, batch_range: tuple[int, int], micro_batches: tuple[int, ...], *,
                  max_accum: int | None = None, min_accum: int = 1, targets: tuple[int, ...] = (),
                  tolerance: float = 0.0) -> BatchGrid:
    """The (micro-batch, grad_accum) pairs a batch search tries, global batch in ``batch_range``.

    Two ways to pick grad_accum, used alone or together:
    - dense (``max_accum`` given): every count min_accum..max_accum, each with the ``micro_batches`` that
      land in the range and the micro-batches that hit its two ends (Pollux's batch optimisation;
      JobModel, elastic scheduling);
    - targets: for each micro-batch, the counts either side of each target global batch (the closest one
      when lo == hi) (the planner's grid of
      global batches); with lo == hi a global batch within ``tolerance`` of it also counts.
    Arguments are hashable (tuples): results are memoised.
    """
    lo, hi = batch_range
    reps = max(1, int(replicas))
    grid = sorted({int(m) for m in micro_batches})
    top = grid[-1] if grid else 0
    pairs: list[tuple[int, int]] = []      # plain Python: the planner calls this ~10^4 times per plan
    if max_accum is not None:
        for a in range(max(1, min_accum), max_accum + 1):
            per = reps * a
            l0, h0 = max(1, -(-lo // per)), min(top, hi // per)
            if l0 <= h0:
                pairs += [(m, a) for m in sorted({l0, h0, *(m for m in grid if l0 <= m <= h0)})]
    if len(targets):
        for m in grid:
            for b in targets:
                q = b / (reps * m)
                # a range: both neighbours (the nearer may leave the range where the other holds it); a fixed
                # batch: the nearest only (a rounding must stay as small as it can)
                near = (round(q),) if lo == hi else (math.floor(q), math.ceil(q))
                for a in sorted({max(min_accum, x, 1) for x in near}):
                    gb = reps * m * a
                    if lo <= gb <= hi or (lo == hi and abs(gb / lo - 1) <= tolerance):
                        pairs.append((m, a))
        pairs = list(dict.fromkeys(pairs))
    return BatchGrid(reps, tuple(pairs))


def best_of(global_batch, step_time_s, noise: NoiseModel) -> tuple[int, np.ndarray]:
    """Index of the candidate that reaches the target soonest (steps(global batch) x step time; the
    same as the highest goodput, Pollux eq. 1), and every candidate's time to target in seconds.
    The first candidate wins ties."""
    time_s = np.asarray(noise.steps(np.asarray(global_batch, float)), float) * np.asarray(step_time_s, float)
    return int(np.argmin(time_s)), time_s


def largest_micro_batch(model: ModelSpec, cfg: TrainingConfig, gpu: GpuSpec, limit: int = 4096,
                        powers_of_two: bool = True) -> int:
    """Largest micro-batch <= ``limit`` whose memory fits ``gpu`` (0 if none): a power of two, or with
    ``powers_of_two=False`` the exact largest (binary search above the largest power of two).
    ``cfg`` gives everything else (precision, recompute, parallel plan)."""
    def fits(b: int) -> bool:
        return job_performance(model, replace(cfg, micro_batch=b), gpu).fits

    best, b = 0, 1
    while b <= limit and fits(b):
        best, b = b, b * 2
    if powers_of_two or best == 0:
        return best
    lo, hi = best, min(limit, 2 * best - 1)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo
