"""THE performance model of one training job, shared by the planner, the cluster simulator, the
rent solver and (later) the runtime.

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
        optimisation over a geometric grid and every accumulation count up to max_accum; the shared
        ``performance.batch_configs``/``best_of``). None if no configuration is allowed, e.g. more
        replicas than max_batch samples."""
        nodes = self.nodes_for(gpus) if nodes is None else nodes
        key = (gpus, nodes)
        if key in self._cache:
            return self._cache[key]
        reps = self.replicas(gpus)
        grid = np.unique(np.round(np.geomspace(1, self.max_local_bsz, 48)).astype(int))
        cands = batch_configs(reps, (self.min_batch, self.max_batch), tuple(grid.tolist()),
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
    def from_jobspec(cls, job, gpu, gpus_per_node: int = 8, tp: int = 1, pp: int = 1, zero: int | None = None,
                     inter_node_gbps: float | None = None, max_local_bsz: int | None = None,
                     field: str = "job") -> "JobModel":
        """Model of a gpuwise job spec on one GPU type through the analytical step time.

        ``job``: a JobSpec or a path to its YAML; ``gpu``: a GpuSpec or a GPU name; ``tp``/``pp``: GPUs
        of one data-parallel replica; ``zero``: ZeRO stage (default: the spec's first allowed one);
        ``max_local_bsz``: per-replica micro-batch limit (default: the largest power of two <= 4096
        that fits in memory, or the spec's fixed micro_batch); ``field`` prefixes error messages.
        Noise model from ``noise_model_for(spec)``; batch range from the spec."""
        from gpuwise.estimate.performance import AnalyticalSource, largest_micro_batch
        from gpuwise.hardware.gpus import get_gpu
        from gpuwise.workload.jobspec import load_job
        from gpuwise.workload.training import ParallelPlan, TrainingConfig

        spec = load_job(job) if isinstance(job, str) else job
        g = get_gpu(gpu) if isinstance(gpu, str) else gpu
        model = spec.model_spec()
        tr = spec.training
        token = model.sample_unit == "token"
        noise = noise_model_for(spec, field)
        if zero is None:
            zero = spec.parallelism.zero[0] if spec.parallelism.zero else 0
        cfg = TrainingConfig(micro_batch=1, seq_len=tr.seq_len if token else 1, grad_accum=1, **tr.config_fields(),
                             plan=ParallelPlan(dp=1, tp=tp, pp=pp, zero=zero))
        local = max_local_bsz or tr.micro_batch or largest_micro_batch(model, cfg, g)
        if local < 1:
            raise InputError(f"{field}.gpu", g.name, f"{model.name} does not fit on {g.name} with tp={tp}, pp={pp}, "
                                                     f"zero={zero}; pick a larger GPU or more model parallelism")
        lo, hi = tr.batch_range
        return cls(AnalyticalSource(model, cfg, g, gpus_per_node, inter_node_gbps), noise, lo, hi, local,
                   gpus_per_node=gpus_per_node, gpus_per_replica=tp * pp, name=spec.name,
                   assumptions=[f"job spec {spec.name} on {g.name}: micro-batch <= {local} per replica "
                                f"(tp={tp}, pp={pp}, zero={zero})"])

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


def noise_model_for(spec, field: str = "training") -> NoiseModel:
    """Steps to target of a JobSpec: its amount at its reference batch, its noise scale (inf = perfect
    scaling when not given) and its learning-rate scaling rule. Shared by the planner and the rent
    solver so both count the same steps."""
    tr = spec.training
    samples = tr.amount_samples(spec.model_spec().sample_unit == "token")
    if not samples or samples <= 0:
        raise InputError(field, None, "the job spec needs a training amount (tokens, samples, epochs or steps)")
    return NoiseModel(phi=tr.noise_scale or math.inf, ref_batch=tr.amount_reference_batch(),
                      samples_at_ref=samples, rule=tr.lr_scaling)
