"""The fitted, data-parallel performance model of a job with a measured profile (the Pollux
applications; Scavenger's affine fit): the policies, the simulator and the rent solver use it for
such jobs. Jobs described by a job spec use their goodput object instead
(`gpuwise.estimate.goodput.JobGoodput`: the planner's layout search, FSDP/TP/PP included).

A ``JobModel`` combines
- a step-time source: seconds per optimizer step for (nodes, data-parallel replicas, local batch,
  grad_accum) -- a fitted form (``PolluxStepTime``: any form of ``gpuwise.estimate.fits``, e.g.
  Pollux's), Scavenger's affine tau(K, B) (``gpuwise.estimate.fits.affine.AffineStepTime``) or the
  analytical model through the single entry point (``gpuwise.estimate.performance.AnalyticalSource``);
- a statistical-efficiency model (``NoiseModel``): how many steps each global batch needs;
- the batch limits: global batch range [min_batch, max_batch] and the per-GPU micro-batch limit.

Conventions (as in Pollux): ``gpus`` are GPUs in use; a data-parallel replica spans
``gpus_per_replica`` GPUs (tensor/pipeline parallel size, 1 for plain DP); ``grad_accum`` is the number
of micro-steps per optimizer step (1 = none; TrainingConfig's meaning), so global batch = replicas *
local_bsz * grad_accum. The batch search is ``performance.batch_configs`` + ``performance.best_of``,
the same one the planner runs.
Throughput is in samples/s (tokens/s = samples/s * seq_len for LMs); goodput = throughput * E(M), in
"samples at the reference batch" per second, so time to target = samples_at_ref / goodput.

Typical use::

    jm = JobModel.for_pollux_app("imagenet")          # fitted on the bundled profile
    choice = jm.best_batch(gpus=8)                     # local batch, grad_accum, global batch, goodput
    hours = jm.time_to_target(gpus=8) / 3600
    table = {g: jm.speedup(g) for g in (1, 2, 4, 8, 16)}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gpuwise.errors import InputError
from gpuwise.estimate.job_space import micro_batch_grid
from gpuwise.estimate.performance import batch_configs, best_of
from gpuwise.estimate.stat_efficiency import NoiseModel


class StepTimeSource(Protocol):
    """Anything that predicts seconds per optimizer step (vectorised over numpy arrays)."""

    def step_time(self, num_nodes, num_replicas, local_bsz, grad_accum=1): ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class PolluxStepTime:
    """Step time from the fitted parameters of any registered form (gpuwise.estimate.fits)."""

    params: object           # PolluxParams, ExtendedParams, BottleneckParams, ...
    origin: str = "fitted"   # where the parameters come from (shown in assumptions)

    def step_time(self, num_nodes, num_replicas, local_bsz, grad_accum=1):
        from gpuwise.estimate.fits import predict   # imported on use: jobs with an analytical model never load the fits

        return predict(self.params, num_nodes, num_replicas, local_bsz, grad_accum)[0]

    def describe(self) -> str:
        from gpuwise.estimate.fits import form_of

        p = self.params
        form = form_of(p).name
        extra = f" delta={p.delta:.3g} eta={p.eta:.3g}" if form == "extended" else ""
        return (f"step time: {form} form of the Pollux model ({self.origin}): alpha_c={p.alpha_c:.4g}s "
                f"beta_c={p.beta_c:.4g}s/sample alpha_r={p.alpha_r:.4g}s alpha_n={p.alpha_n:.4g}s "
                f"gamma={p.gamma:.3g}{extra}")


@dataclass(frozen=True)
class BatchChoice:
    """The best batch configuration for a GPU count."""

    gpus: int
    nodes: int
    replicas: int
    local_bsz: int          # per-replica micro-batch
    grad_accum: int         # micro-steps per optimizer step (1 = no accumulation)
    global_batch: int
    step_time: float        # s per optimizer step
    throughput: float       # samples/s
    efficiency: float       # statistical efficiency E(global_batch) in (0, 1]
    goodput: float          # throughput * efficiency (reference-batch samples/s)


@dataclass
class JobModel:
    """Performance model of one job (see module docstring)."""

    step_source: StepTimeSource     # seconds per optimizer step
    noise: NoiseModel               # steps needed per global batch (statistical efficiency)
    min_batch: int                  # smallest allowed global batch
    max_batch: int                  # largest allowed global batch
    max_local_bsz: int              # per-GPU micro-batch limit (memory)
    gpus_per_node: int = 8          # GPUs per node when placing replicas
    gpus_per_replica: int = 1       # tp * pp of one data-parallel replica
    max_accum: int = 16             # most micro-steps per optimizer step considered
    name: str = "job"
    assumptions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.min_batch < 1 or self.max_batch < self.min_batch:
            raise InputError("batch range", (self.min_batch, self.max_batch), "need 1 <= min <= max")
        if self.max_local_bsz < 1:
            raise InputError("max_local_bsz", self.max_local_bsz, "must be >= 1")
        self._cache: dict[tuple[int, int], BatchChoice | None] = {}

    # -- layout -----------------------------------------------------------------------------
    def nodes_for(self, gpus: int) -> int:
        """Fewest nodes that hold ``gpus`` GPUs (packed placement)."""
        return max(1, math.ceil(gpus / self.gpus_per_node))

    def replicas(self, gpus: int) -> int:
        return max(1, gpus // self.gpus_per_replica)

    # -- speed ------------------------------------------------------------------------------
    def step_time(self, gpus: int, nodes: int | None, local_bsz, grad_accum=1):
        """Seconds per optimizer step."""
        nodes = self.nodes_for(gpus) if nodes is None else nodes
        return self.step_source.step_time(nodes, self.replicas(gpus), local_bsz, grad_accum)

    def global_batch(self, gpus: int, local_bsz, grad_accum=1):
        return self.replicas(gpus) * np.asarray(local_bsz) * np.asarray(grad_accum)

    def throughput(self, gpus: int, nodes: int | None, local_bsz, grad_accum=1):
        """Samples per second."""
        return self.global_batch(gpus, local_bsz, grad_accum) / self.step_time(gpus, nodes, local_bsz, grad_accum)

    def efficiency(self, global_batch):
        return self.noise.efficiency(global_batch)

    def goodput(self, gpus: int, nodes: int | None, local_bsz, grad_accum=1):
        """Throughput x statistical efficiency (Pollux eq. 1)."""
        return (self.throughput(gpus, nodes, local_bsz, grad_accum)
                * self.efficiency(self.global_batch(gpus, local_bsz, grad_accum)))

    # -- choices ----------------------------------------------------------------------------
    def best_batch(self, gpus: int, nodes: int | None = None) -> BatchChoice | None:
        """Local batch and grad_accum maximising goodput (= reaching the target soonest) on ``gpus`` GPUs
        with the global batch in [min_batch, max_batch] and local batch <= max_local_bsz (Pollux's batch
        optimisation over the powers of two up to the limit, the micro-batches that hit the range's ends,
        and every accumulation count up to max_accum; the shared ``performance.batch_configs``/``best_of``). None if no configuration is allowed, e.g. more
        replicas than max_batch samples."""
        nodes = self.nodes_for(gpus) if nodes is None else nodes
        key = (gpus, nodes)
        if key in self._cache:
            return self._cache[key]
        reps = self.replicas(gpus)
        cands = batch_configs(reps, (self.min_batch, self.max_batch), micro_batch_grid(self.max_local_bsz),
                              max_accum=self.max_accum)
        if not len(cands):
            self._cache[key] = None
            return None
        loc, acc, gb = cands.micro, cands.grad_accum, cands.global_batch
        st = np.asarray(self.step_time(gpus, nodes, loc, acc), float)
        i, _ = best_of(gb, st, self.noise)
        thr = gb[i] / st[i]
        eff = float(self.efficiency(gb[i]))
        choice = BatchChoice(gpus, nodes, reps, int(loc[i]), int(acc[i]), int(gb[i]), float(st[i]), float(thr),
                             eff, float(thr * eff))
        self._cache[key] = choice
        return choice

    def fixed_batch(self, gpus: int, global_batch: int, nodes: int | None = None) -> BatchChoice | None:
        """The configuration for a fixed global batch: fewest micro-steps whose local batch fits."""
        nodes = self.nodes_for(gpus) if nodes is None else nodes
        reps = self.replicas(gpus)
        for a in range(1, self.max_accum + 1):
            local = math.ceil(global_batch / (reps * a))
            if local <= self.max_local_bsz:
                gb = reps * local * a
                st = float(self.step_time(gpus, nodes, local, a))
                eff = float(self.efficiency(gb))
                return BatchChoice(gpus, nodes, reps, local, a, gb, st, gb / st, eff, gb / st * eff)
        return None

    def goodput_table(self, gpus, nodes, batches, limit: float | None = None, speed: float = 1.0,
                      accumulate: bool = False) -> np.ndarray:
        """Fraction of the job per second for GPU counts ``gpus`` (a column) on ``nodes`` x global
        ``batches`` (a row), data parallel (one replica per GPU): ceil(local / limit) micro-steps where
        the local batch exceeds the per-GPU ``limit`` (default max_local_bsz), 0 there unless
        ``accumulate``; step times divided by ``speed`` (another GPU type's speed relative to the one
        the model was fitted on); statistical efficiency and training amount from the noise model.
        What the policies read for a fitted job (`policies.job_model_perf`)."""
        limit = self.max_local_bsz if limit is None else limit
        b = np.asarray(batches, float)[None, :]
        g = np.asarray(gpus, float)
        local = b / g
        micro_steps = np.maximum(1.0, np.ceil(local / limit - 1e-9))
        g_, nodes_, micro_ = np.broadcast_arrays(g, np.asarray(nodes, float), local / micro_steps)
        step = np.asarray(self.step_source.step_time(nodes_, g_, micro_, micro_steps), float) / speed
        good = b / step * np.asarray(self.efficiency(b), float) / self.noise.samples_at_ref
        return np.where((micro_steps <= 1) | accumulate, good, 0.0)

    def speedup(self, gpus: int, nodes: int | None = None) -> float:
        """Best goodput on ``gpus`` GPUs over the best goodput on one replica (Pollux SPEEDUP)."""
        base = self.best_batch(self.gpus_per_replica, 1)
        cur = self.best_batch(gpus, nodes)
        if base is None or cur is None:
            return 0.0
        return cur.goodput / base.goodput

    def steps_to_target(self, global_batch) -> float:
        return float(self.noise.steps(global_batch))

    def time_to_target(self, gpus: int, nodes: int | None = None, choice: BatchChoice | None = None) -> float:
        """Seconds of training to reach the target (no restarts or checkpoints; see preemption.py)."""
        choice = choice or self.best_batch(gpus, nodes)
        if choice is None:
            return math.inf
        return self.steps_to_target(choice.global_batch) * choice.step_time

    def describe(self) -> list[str]:
        return [self.step_source.describe(), self.noise.describe(),
                f"global batch in [{self.min_batch}, {self.max_batch}], local batch <= {self.max_local_bsz}, "
                f"{self.gpus_per_node} GPUs per node", *self.assumptions]

    # -- constructors -----------------------------------------------------------------------
    @classmethod
    def for_pollux_app(cls, app: str, fit_points: str = "all", gpus_per_node: int = 4) -> "JobModel":
        """Model of a bundled Pollux application: step time fitted on its profile (``fit_points``:
        "all" rows of placements.csv, or "online" = the <= 10 points of ``ONLINE_PLAN``), noise scale
        from its reference-batch validation trace, batch range from its validation files, local
        batch limit from the largest profiled local batch, target as in calibration/pollux_apps.csv."""
        from gpuwise.estimate.fits.pollux import fit_pollux
        from gpuwise.estimate.stat_efficiency import effective_phi, noise_scale
        from gpuwise.workload.pollux_traces import load_app_info, load_placements, load_validation

        info = load_app_info(app)
        rows = all_rows = load_placements(app)
        if fit_points == "online":
            from gpuwise.workload.pollux_traces import online_training_points

            rows = [rows[i] for i in online_training_points(rows)]
        a = np.array([(r.num_nodes, r.num_replicas, r.local_bsz, r.step_time, r.sync_time) for r in rows])
        params = fit_pollux(*a.T)
        val = load_validation(app)
        m0 = min(val)
        ref = val[m0]
        target = next((r.progress for r in ref if info.reached(r.metric)), ref[-1].progress)
        prog = [r.progress for r in ref]
        phis = noise_scale([r.grad_sqr for r in ref], [r.grad_var for r in ref], m0)
        phi = effective_phi(target, max(val), m0, phis, prog)
        noise = NoiseModel(phi=phi, ref_batch=m0, samples_at_ref=target * m0)
        max_local = max(r.local_bsz for r in all_rows)
        return cls(PolluxStepTime(params, f"{len(rows)} rows of the Pollux {app} profile"), noise, m0, max(val),
                   max_local, gpus_per_node=gpus_per_node, name=app,
                   assumptions=[f"target: {info.metric} {'>=' if info.higher_is_better else '<='} {info.target} "
                                f"({target:.0f} steps at batch {m0}, from the Pollux validation trace)",
                                f"phi: constant equivalent of the measured noise-scale trace (exact at batch {max(val)})"])
