"""THE goodput object of one job: the only place where a job's layout, memory, step time, batch,
goodput and checkpoint size on a hardware shape are decided.

AdaptDL's ``GoodputFunction`` is the model of the idea: one object per job, built once, asked for
(GPU type, GPU count, nodes) and answering with the best configuration and its goodput. Here it is
built from a job spec (the analytical model, ``JobGoodput.from_jobspec``) and searches the layouts
the spec allows exactly as the planner does (`gpuwise.estimate.layout_search`): dp/tp/pp, ZeRO
stage, recompute, micro-batch and gradient accumulation. Every caller asks it:

- the planner's candidates and `estimate` (``shape``: the best over the spec's batch grid);
- the policies' goodput tables and the simulator's ground truth for job-spec jobs (``table`` and
  ``at_batch``: the best layout for a given global batch, exactly);
- the service's prediction (through the policies) and the rent solver's speedups (``speedup``);
- restarts (``restart_s``: the spec's fixed start-up plus reading the checkpoint).

Answers are memoised per shape, so a policy asking every count of a 2,000-GPU cluster each round
pays for each shape once. Goodput is the fraction of the whole job done per second (1 / time to
target), which is what every policy compares.

Measured calibration: ``observe`` takes what the runtime measured on a shape (step seconds, CUDA peak
memory) and refits the job's `gpuwise.estimate.calibration.Calibration`; from then on every answer
(``shape``, ``at_batch``, ``best``, ``table``, ``speedup``) is the calibrated one and ``assumptions``
say by how much and from how many steps. The search itself (and its memo) stays uncalibrated.

Jobs fitted on measured profiles (Pollux applications, the runtime's online fit) keep their fitted
data-parallel step-time model in `gpuwise.estimate.job_model.JobModel`: they have no layout to search.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from gpuwise.estimate.calibration import MAX_OBSERVATIONS, Calibration, Observation, fit_calibration
from gpuwise.estimate.job_space import JobSpace, space_from_jobspec
from gpuwise.estimate.layout_search import RunOption, ShapeResult, _gpu, evaluate_shape, recompute_variants


class JobGoodput:
    """Goodput of one job on any hardware shape (see the module docstring)."""

    def __init__(self, space: JobSpace, exhaustive: bool = False) -> None:
        self.space = space
        # the search's memo: shapes, plan variants that fit, variants that did not, step-time notes
        self.cache: dict = {"_exhaustive": True} if exhaustive else {}
        self._tables: dict[tuple, np.ndarray] = {}   # policies ask the same table every round
        self.observations: list[Observation] = []    # what the runtime measured (see ``observe``)
        self.calibration = Calibration()              # fitted on them (empty: the identity)

    @classmethod
    def from_jobspec(cls, spec, *, require_amount: bool = True, inter_node_gbps: float | None = None) -> "JobGoodput":
        """``spec``: a validated JobSpec or the path of its YAML."""
        from gpuwise.workload.jobspec import load_job

        spec = load_job(spec) if isinstance(spec, str) else spec
        return cls(space_from_jobspec(spec, require_amount=require_amount, inter_node_gbps=inter_node_gbps))

    @property
    def name(self) -> str:
        return self.space.name

    # -- one shape ---------------------------------------------------------------------------
    def shape(self, gpu: str, gpus_per_node: int, nodes: int, gpus: int | None = None,
              inter_node_gbps: float | None = None) -> ShapeResult:
        """The fastest configuration over the job's batch grid on ``gpus`` GPUs (default: every GPU of
        ``nodes`` nodes of ``gpus_per_node``) of type ``gpu``, with the shape's node network
        ``inter_node_gbps`` (None: the job's); ``best`` None when nothing fits. Calibrated."""
        res = evaluate_shape(self.space, gpu, gpus_per_node, nodes, self.cache, gpus, inter_node_gbps=inter_node_gbps)
        best = self.calibration.apply(res.best)
        return res if best is res.best else replace(res, best=best)

    def at_batch(self, gpu: str, gpus_per_node: int, gpus: int, batch: int, nodes: int | None = None) -> RunOption | None:
        """The fastest layout holding exactly global batch ``batch`` on ``gpus`` GPUs (packed onto the
        fewest nodes unless ``nodes`` is given); None when none fits or none holds that batch. Calibrated."""
        return self.calibration.apply(self.predicted_at_batch(gpu, gpus_per_node, gpus, batch, nodes))

    def predicted_at_batch(self, gpu: str, gpus_per_node: int, gpus: int, batch: int,
                           nodes: int | None = None) -> RunOption | None:
        """``at_batch`` without the measured calibration: the analytic model's own answer."""
        nodes = nodes or math.ceil(gpus / gpus_per_node)
        return evaluate_shape(self.space, gpu, gpus_per_node, nodes, self.cache, gpus, int(batch)).best

    # -- measurements --------------------------------------------------------------------------
    def observe(self, gpu: str, gpus_per_node: int, gpus: int, nodes: int, batch: int, steps: int,
                step_s: float, peak_gib: float | None = None) -> Observation:
        """Record ``steps`` steps measured at ``step_s`` s each (and the CUDA reserved peak ``peak_gib``,
        None off CUDA) on ``gpus`` GPUs of type ``gpu`` over ``nodes`` nodes at global batch ``batch``,
        next to the uncalibrated prediction there, and refit the calibration. Returns the observation.
        A batch the GPUs do not share evenly (the runtime gives some ranks one sample more) is predicted
        at ``gpus`` x its largest share: the slowest rank sets a synchronous step."""
        opt = self.predicted_at_batch(gpu, gpus_per_node, gpus, batch, nodes) or \
            self.predicted_at_batch(gpu, gpus_per_node, gpus, gpus * math.ceil(batch / gpus), nodes)
        obs = Observation(gpu, int(gpus), int(nodes), int(batch), int(steps), float(step_s),
                          None if opt is None else opt.step_time_s, peak_gib,
                          None if opt is None else opt.memory_reserved_gib)
        self.observations.append(obs)
        if len(self.observations) > MAX_OBSERVATIONS:    # a long job: the newest chunks, a bounded refit
            del self.observations[0]
        self.calibration = fit_calibration(self.observations)
        self._tables.clear()      # the tables were calibrated with the old fit
        return obs

    def best(self, gpu: str, gpus_per_node: int, gpus: int, nodes: int | None = None) -> RunOption | None:
        """``shape`` for a GPU count packed onto the fewest nodes: the best option, or None."""
        nodes = nodes or math.ceil(gpus / gpus_per_node)
        return self.shape(gpu, gpus_per_node, nodes, gpus).best

    # -- tables for policies -----------------------------------------------------------------
    def table(self, gpu: str, max_gpus: int, gpus_per_node: int, batches) -> np.ndarray:
        """Goodput (fraction of the job per second) for 1..max_gpus GPUs (rows) x global ``batches``
        (columns), each at its best layout; 0 where nothing fits or the batch cannot be held. Memoised
        per (GPU type, counts, node size, batches) and read-only."""
        key = (gpu, max_gpus, gpus_per_node, tuple(int(b) for b in batches))
        out = self._tables.get(key)
        if out is None:
            out = np.zeros((max_gpus, len(batches)))
            for g in range(1, max_gpus + 1):
                for j, b in enumerate(key[3]):
                    opt = self.at_batch(gpu, gpus_per_node, g, b)
                    if opt is not None:
                        out[g - 1, j] = opt.goodput
            out.flags.writeable = False      # shared by every caller: read-only
            self._tables[key] = out
        return out

    def speedup(self, gpu: str, gpus_per_node: int, gpus: int) -> float:
        """Best goodput on ``gpus`` GPUs over the best goodput on the fewest GPUs that hold the job."""
        cur = self.best(gpu, gpus_per_node, gpus)
        base = next((o for o in (self.best(gpu, gpus_per_node, n) for n in range(1, gpus + 1)) if o), None)
        return 0.0 if cur is None or base is None else cur.goodput / base.goodput

    def fewest_gpus(self, gpu: str, gpus_per_node: int, limit: int) -> int | None:
        """The fewest GPUs (<= ``limit``) on which the job fits with a batch in its range."""
        return next((n for n in range(1, limit + 1) if self.best(gpu, gpus_per_node, n) is not None), None)

    # -- the memory question (fit-gpus, estimate's nearest feasible option, plan's hint) --------------
    @classmethod
    def for_config(cls, model, cfg) -> "JobGoodput":
        """The goodput object of one fixed training configuration (`job_space.space_for_config`); ``model``:
        a ModelSpec or a name. Built for the memory question (below); its goodput answers (``shape``, ``best``)
        rank by time per sample over any global batch up to 2^20, so they favour long accumulation: ask them
        whether a layout fits, and a job spec (with its batch range) which one is fastest."""
        from gpuwise.estimate.job_space import space_for_config
        from gpuwise.workload.models import load_model

        return cls(space_for_config(load_model(model), cfg))

    def _memory_cfg(self, micro_batch: int | None):
        from gpuwise.workload.training import TrainingConfig

        micro = micro_batch or self.space.micro_batches[0]
        return TrainingConfig(**{**self.space.base.__dict__, "micro_batch": int(micro)})

    def fitting_plans(self, gpu, gpus: int, gpus_per_node: int = 8, micro_batch: int | None = None) -> list:
        """Memory first: every plan (any tp/pp/cp/ZeRO, every recompute variant) that fits on exactly ``gpus``
        GPUs of ``gpu`` (a name or GpuSpec) at ``micro_batch`` (default the job's first), ranked by
        `feasible_plans.plan_cost`; [(config, MemoryEstimate)]."""
        from gpuwise.estimate.feasible_plans import feasible_plans

        return feasible_plans(self.space.model, self._memory_cfg(micro_batch), _gpu_spec(gpu), gpus, gpus_per_node)

    def fewest_fitting(self, gpu, gpus_per_node: int = 8, limit: int = 1024, micro_batch: int | None = None):
        """Memory first: the fewest GPUs (<= ``limit``) on which some plan fits at ``micro_batch``, with its
        ranked plans (``fitting_plans``); None when none does. Unlike ``fewest_gpus``, no global batch."""
        from gpuwise.estimate.feasible_plans import fewest_gpus

        return fewest_gpus(self.space.model, self._memory_cfg(micro_batch), _gpu_spec(gpu), limit, gpus_per_node)

    def nearest_fitting(self, gpu, gpus: int, gpus_per_node: int = 8, limit: int = 1024):
        """Memory first, for a configuration that does not fit on ``gpus`` GPUs: the nearest change that does,
        (GPU count, ranked plans). The count asked for is kept where another plan or recompute fits on it (a layout
        change is nearer than renting a different number of GPUs); otherwise the fewest GPUs on 8-GPU nodes
        (``fewest_fitting``, as fit-gpus answers)."""
        same = self.fitting_plans(gpu, gpus, gpus_per_node) if gpus <= limit else []
        return (gpus, same) if same else self.fewest_fitting(gpu, 8, limit)

    def memory_floor(self, limit: int, gpus_per_node: int = 8, micro_batch: int | None = None):
        """The smallest per-GPU memory of any plan on at most ``limit`` GPUs (`feasible_plans.memory_floor`)."""
        from dataclasses import replace

        from gpuwise.estimate.feasible_plans import memory_floor
        from gpuwise.workload.training import ParallelPlan

        cfg = replace(self._memory_cfg(micro_batch), plan=ParallelPlan(), recompute="none")
        return memory_floor(self.space.model, cfg, limit, gpus_per_node)

    # -- restarts ------------------------------------------------------------------------------
    def restart_s(self, option: RunOption) -> float:
        """Seconds a (re)start costs on ``option``'s shape: the spec's fixed start-up plus reading the
        checkpoint at the spec's per-node bandwidth."""
        read_s = option.checkpoint_gb / (self.space.checkpoint_write_gbps * max(1, option.nodes))
        return self.space.restart_s + read_s

    # -- what it searched, and what it assumes -----------------------------------------------------
    def searched_shapes(self) -> dict[tuple[str, int, int], ShapeResult]:
        """(GPU, GPUs per node, nodes) -> result, for every whole-node shape searched over the batch grid."""
        return {k[:3]: replace(v, best=self.calibration.apply(v.best)) for k, v in self.cache.items()
                if isinstance(v, ShapeResult) and k[4] is None and k[3] == k[1] * k[2]}

    def step_notes(self) -> list[str]:
        """The step-time model's assumptions on the shapes timed so far (pipeline bubbles left out), sorted:
        the same set in the same order whichever shapes the search happened to time first."""
        return sorted(self.cache.get("_step_notes", ()))

    def checkpoint_note(self) -> str | None:
        return self.cache.get("_checkpoint_note")

    def assumptions(self) -> list[str]:
        sp = self.space
        out = list(sp.assumptions)
        if sp.model.is_transformer:
            out.append(f"layouts: tp {list(sp.tp)}, pp {list(sp.pp)}, ZeRO {list(sp.zero)}, each with the lightest "
                       f"of recompute {', '.join(recompute_variants(sp.model, sp.base))} that fits; micro-batches "
                       f"{list(sp.micro_batches)}; global batches {list(sp.batches)}")
        if self.checkpoint_note():
            out.append(self.checkpoint_note())
        out += [f"step time: {n}" for n in self.step_notes()]
        out += [f"measured calibration: {n}" for n in self.calibration.notes()]
        return out


def _gpu_spec(gpu):
    """A GpuSpec from a name (a GpuSpec is kept: `fit-gpus` and `estimate` may pass user-defined GPUs)."""
    return _gpu(gpu) if isinstance(gpu, str) else gpu
