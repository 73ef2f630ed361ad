"""Ground-truth speed of the Pollux applications, from their measured profiles.

The simulator advances jobs with this model, and (as an oracle, like Pollux's own simulator)
policies read the same numbers through `gpuwise.policies.base.PerfModel`.

Step time of one optimizer step with ``r`` replicas on ``n`` nodes at per-GPU batch ``m``::

    step(n, r, m) = compute(m) / speed(gpu) + overhead(n, r)

- ``compute(m)``: the measured single-GPU step time (T4), interpolated linearly in ``m``
  between measured per-GPU batches and clamped at the smallest one (tiny batches do not get
  faster: fixed per-step costs dominate).
- ``overhead(n, r)``: the measured extra time of the (n, r) placements over a single GPU at the
  same per-GPU batch, averaged over batches, interpolated linearly in r and then in n between the
  measured node counts (placements.csv: 1-4 nodes; scalability.csv: 6, 8, 12, 16 nodes).
- ``speed(gpu)``: compute speed relative to a T4 = geometric mean of the fp16 tensor peak ratio
  and the memory-bandwidth ratio (gpus.csv). An assumption, not validated: the profiles are T4 only.

Statistical efficiency (Pollux, OSDI'21 eq. 6): with the gradient statistics of the reference
batch M0 at the current progress, ``eff(M) = gain/scale``, ``gain = (var + sqr)/(var/scale + sqr)``,
``scale = M/M0``. Progress is counted in iterations at M0 (the validation files' ``progress``),
so ``d progress/dt = throughput(M) * eff(M) / M0``; the statistics are piecewise constant between
validation rows, which keeps completion times exact in an event-driven simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gpuwise.errors import unknown_name
from gpuwise.policies.base import job_batch_range

REFERENCE_GPU = "T4"  # the Pollux profiles were measured on AWS g4dn (NVIDIA T4)


@dataclass(frozen=True)
class AppProfile:
    """Everything the simulator needs about one Pollux application (arrays are read-only)."""

    name: str
    init_batch: int            # M0: smallest validated global batch (progress is counted at it)
    max_batch: int             # largest validated global batch (the elastic upper bound)
    min_local_bsz: int         # smallest measured per-GPU batch
    max_local_bsz: int         # largest measured per-GPU batch on a T4 (what fits in 16 GB)
    target_progress: float     # end of the recorded training curve (last validation row at M0)
    job_progress: float        # simulated job size: progress at M0 when the metric reaches the goal
    goal: str                  # the target metric (shared with gpuwise.estimate.job_model)
    seg_end: np.ndarray        # progress where each gradient-statistics segment ends
    grad_sqr: np.ndarray       # |E g|^2 per segment
    grad_var: np.ndarray       # tr Var g per segment (at M0)
    local_bsz: np.ndarray      # measured per-GPU batches (ascending) of the single-GPU profile
    compute_s: np.ndarray      # single-GPU step time at those batches
    overhead_nodes: np.ndarray          # measured node counts (ascending)
    overhead_table: tuple               # per node count: (replicas array, overhead seconds array)
    points: int                # measured rows used

    def assumptions(self) -> list[str]:
        return [f"{self.name}: step time = T4 single-GPU profile + measured multi-GPU overhead "
                f"({self.points} Pollux profile rows); job size {self.job_progress:.0f} iterations "
                f"at batch {self.init_batch} (until {self.goal} in validation-{self.init_batch}.csv); "
                f"batch range {self.init_batch}-{self.max_batch}, per-GPU batch <= {self.max_local_bsz} on T4"]


def applications() -> tuple[str, ...]:
    from gpuwise.workload.pollux_traces import APPLICATIONS

    return tuple(APPLICATIONS)


@lru_cache(maxsize=None)
def app_profile(app: str) -> AppProfile:
    """Load and condition the measured profile of a Pollux application (cached)."""
    from gpuwise.workload.pollux_traces import load_app_info, load_placements, load_scalability, load_validation

    if app not in applications():
        raise unknown_name("application", app, applications())
    placements = load_placements(app)
    scal = load_scalability(app)
    val = load_validation(app)
    m0 = min(val)
    rows0 = val[m0]
    single = sorted((r.local_bsz, r.step_time) for r in placements if r.num_replicas == 1)
    lbs = np.array([b for b, _ in single], float)
    comp = np.array([t for _, t in single], float)
    # average duplicates (same batch measured twice)
    ulbs, inv = np.unique(lbs, return_inverse=True)
    ucomp = np.bincount(inv, weights=comp) / np.bincount(inv)

    def compute(m: np.ndarray) -> np.ndarray:
        return np.interp(m, ulbs, ucomp)

    extra: dict[int, dict[int, list[float]]] = {}
    for r in placements + scal:
        if r.num_replicas == 1:
            continue
        over = max(0.0, r.step_time - float(compute(np.array([r.local_bsz]))[0]))
        extra.setdefault(r.num_nodes, {}).setdefault(r.num_replicas, []).append(over)
    extra.setdefault(1, {})[1] = [0.0]
    nodes = np.array(sorted(extra), float)
    table = []
    for n in sorted(extra):
        reps = sorted(extra[n])
        table.append((np.array(reps, float), np.array([float(np.mean(extra[n][k])) for k in reps])))
    seg_end = np.array([r.progress for r in rows0], float)
    info = load_app_info(app)  # shared target metric (gpuwise/data/calibration/pollux_apps.csv)
    target = next((r.progress for r in rows0 if info.reached(r.metric)), rows0[-1].progress)
    goal = f"{info.metric} {'>=' if info.higher_is_better else '<='} {info.target:g}"
    return AppProfile(
        name=app, init_batch=int(m0), max_batch=int(max(val)),
        min_local_bsz=int(ulbs[0]), max_local_bsz=int(ulbs[-1]),
        target_progress=float(seg_end[-1]), job_progress=float(target), goal=goal, seg_end=seg_end,
        grad_sqr=np.array([max(r.grad_sqr, 1e-30) for r in rows0], float),
        grad_var=np.array([max(r.grad_var, 0.0) for r in rows0], float),
        local_bsz=ulbs, compute_s=ucomp, overhead_nodes=nodes, overhead_table=tuple(table),
        points=len(placements) + len(scal))


def gpu_speed(gpu: str) -> tuple[float, float]:
    """(compute speed relative to a T4, memory relative to a T4) for a canonical GPU name."""
    from gpuwise.hardware.cluster import relative_speed

    return relative_speed(gpu, REFERENCE_GPU)


def _overhead(p: AppProfile, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Measured multi-GPU overhead interpolated in replicas, then in nodes (vectorised)."""
    nodes = np.asarray(nodes, float)
    replicas = np.asarray(replicas, float)
    per_node = np.stack([np.interp(replicas, reps, over) for reps, over in p.overhead_table])  # (N, ...)
    ns = p.overhead_nodes
    idx = np.clip(np.searchsorted(ns, nodes), 1, len(ns) - 1) if len(ns) > 1 else np.zeros_like(nodes, int)
    if len(ns) == 1:
        return per_node[0]
    lo, hi = ns[idx - 1], ns[idx]
    w = np.clip((nodes - lo) / (hi - lo), 0.0, 1.0)
    take = lambda k: np.take_along_axis(per_node, k[None, ...], axis=0)[0]  # noqa: E731
    return (1 - w) * take(idx - 1) + w * take(idx)


def step_time(app: str, gpu: str, num_nodes, num_replicas, local_bsz) -> np.ndarray:
    """Seconds per optimizer step (vectorised over the three arrays)."""
    p = app_profile(app)
    speed, _ = gpu_speed(gpu)
    m = np.asarray(local_bsz, float)
    comp = np.interp(m, p.local_bsz, p.compute_s) / speed
    return comp + _overhead(p, np.broadcast_to(num_nodes, m.shape), np.broadcast_to(num_replicas, m.shape))


def max_local_bsz(app: str, gpu: str) -> int:
    """Largest per-GPU batch that fits: the T4 measurement scaled by the memory ratio."""
    p = app_profile(app)
    return max(1, int(p.max_local_bsz * gpu_speed(gpu)[1]))


def throughput(app: str, gpu: str, num_gpus, num_nodes, batch, accumulate: bool = False) -> np.ndarray:
    """Samples per second at global ``batch`` on ``num_gpus`` GPUs over ``num_nodes`` nodes.

    Where the per-GPU batch does not fit in memory: 0 by default (the configuration is
    infeasible), or with ``accumulate=True`` the job runs ceil(local/limit) micro-steps of
    gradient accumulation per step (what a user's fixed request does, as in Pollux's baselines)."""
    g = np.asarray(num_gpus, float)
    b = np.asarray(batch, float)
    local = b / np.maximum(g, 1)
    limit = max_local_bsz(app, gpu)
    steps = np.maximum(1.0, np.ceil(local / limit - 1e-9))
    micro = local / steps
    p = app_profile(app)
    speed, _ = gpu_speed(gpu)
    comp = np.interp(micro, p.local_bsz, p.compute_s) / speed
    shape = np.broadcast(g, b, np.asarray(num_nodes, float)).shape
    over = _overhead(p, np.broadcast_to(num_nodes, shape), np.broadcast_to(g, shape))
    x = b / (steps * comp + over)
    ok = (g >= 1) & ((steps <= 1) | accumulate)
    return np.where(ok, x, 0.0)


def segment_index(p: AppProfile, progress: float) -> int:
    return min(int(np.searchsorted(p.seg_end, progress, side="right")), len(p.seg_end) - 1)


def efficiency(app: str, batch, progress: float) -> np.ndarray:
    """Pollux statistical efficiency of global ``batch`` at ``progress`` (1 at M0)."""
    p = app_profile(app)
    i = segment_index(p, progress)
    return _eff(p, np.asarray(batch, float), p.grad_sqr[i], p.grad_var[i])


def _eff(p: AppProfile, batch: np.ndarray, sqr, var) -> np.ndarray:
    scale = np.maximum(batch / p.init_batch, 1e-9)
    gain = (var + sqr) / (var / scale + sqr)
    return gain / scale


def time_to_progress(app: str, rate_per_segment: np.ndarray, progress: float, target: float) -> float:
    """Seconds to go from ``progress`` to ``target`` when the progress rate in segment i is
    ``rate_per_segment[i]`` (iterations at M0 per second)."""
    p = app_profile(app)
    t = 0.0
    i = segment_index(p, progress)
    while progress < target - 1e-9:
        end = target if i >= len(p.seg_end) - 1 else min(p.seg_end[i], target)
        r = rate_per_segment[i]
        if r <= 0:
            return math.inf
        t += (end - progress) / r
        progress = end
        i += 1
    return t


def progress_after(app: str, rate_per_segment: np.ndarray, progress: float, seconds: float,
                   target: float) -> float:
    """Progress reached after ``seconds`` at the per-segment rates (capped at ``target``)."""
    p = app_profile(app)
    i = segment_index(p, progress)
    while seconds > 0 and progress < target:
        end = target if i >= len(p.seg_end) - 1 else min(p.seg_end[i], target)
        r = rate_per_segment[i]
        if r <= 0:
            break
        need = (end - progress) / r
        if need >= seconds:
            return progress + seconds * r
        seconds -= need
        progress = end
        i += 1
    return min(progress, target)


def segment_rates(app: str, gpu: str, num_gpus: int, num_nodes: int, batch: float) -> np.ndarray:
    """Progress rate (iterations at M0 per second) in every gradient-statistics segment."""
    p = app_profile(app)
    x = float(throughput(app, gpu, num_gpus, num_nodes, batch, accumulate=True))
    return x * _eff(p, np.full(len(p.seg_end), float(batch)), p.grad_sqr, p.grad_var) / p.init_batch


class GroundTruthPerf:
    """`gpuwise.policies.base.PerfModel` backed by the measured profiles (rigid jobs: their logged
    duration on exactly their requested GPUs). Tables are cached per (app, GPU type, shape)."""

    def __init__(self, cluster=None) -> None:
        """``cluster`` (a ClusterSpec): GPUs per node and network for jobs described by a job spec."""
        from gpuwise.policies.job_model_perf import JobModelPerf

        self._tp: dict[tuple, np.ndarray] = {}
        self._rates: dict[tuple, np.ndarray] = {}
        self._gpn = {t: cluster.max_gpus_per_node(t) for t in cluster.gpu_types} if cluster else {}
        # job-spec jobs: no measured profile, their goodput object is their truth
        self.specs = JobModelPerf.for_cluster(cluster) if cluster else JobModelPerf()

    def batch_range(self, job, gpu_type: str) -> tuple[int, int, int]:
        if job.jobspec is not None:
            return self.specs.batch_range(job, gpu_type, self._gpn.get(gpu_type, 8))
        if job.application is None:
            return (0, 0, 0)
        p = app_profile(job.application)
        return (*job_batch_range(job, p.init_batch, p.max_batch), max_local_bsz(job.application, gpu_type))

    def _throughput_grid(self, app: str, gpu: str, max_gpus: int, gpn: int, batches: tuple,
                         accumulate: bool = False) -> np.ndarray:
        key = (app, gpu, max_gpus, gpn, batches, accumulate)
        tp = self._tp.get(key)
        if tp is None:
            g = np.arange(1, max_gpus + 1, dtype=float)[:, None]
            nodes = np.ceil(g / gpn)
            tp = throughput(app, gpu, g, nodes, np.asarray(batches, float)[None, :], accumulate)
            if len(self._tp) > 4096:
                self._tp.clear()
            self._tp[key] = tp
        return tp

    def goodput_grid(self, js, gpu_type: str, max_gpus: int, gpus_per_node: int,
                     batches: tuple[int, ...], accumulate: bool = False) -> np.ndarray:
        job = js.job
        if job.jobspec is not None:
            return self.specs.goodput_grid(js, gpu_type, max_gpus, gpus_per_node, batches, accumulate)
        if job.speedup is not None:  # moldable rental job: s(g) single-GPU seconds per second
            out = np.zeros((max_gpus, len(batches)))
            if job.gpu_type in (None, gpu_type):
                g = np.arange(1, max_gpus + 1, dtype=float)
                out[:, :] = (np.asarray(job.speedup(g), float) / job.duration_s)[:, None]
            return out
        if job.application is None:
            out = np.zeros((max_gpus, len(batches)))
            if job.num_gpus <= max_gpus and (job.gpu_type in (None, gpu_type)):
                out[job.num_gpus - 1, :] = 1.0 / job.duration_s
            return out
        if job.gpu_type not in (None, gpu_type):
            return np.zeros((max_gpus, len(batches)))
        p = app_profile(job.application)
        tp = self._throughput_grid(job.application, gpu_type, max_gpus, gpus_per_node, tuple(batches),
                                 accumulate)
        i = segment_index(p, js.progress)
        eff = _eff(p, np.asarray(batches, float), p.grad_sqr[i], p.grad_var[i])
        return tp * eff[None, :] / (p.init_batch * p.job_progress)

    def rates(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int | None) -> np.ndarray:
        """Progress rate per gradient-statistics segment (rigid jobs: one segment, seconds/s;
        job-spec jobs: one segment, fraction of the job per second)."""
        if job.jobspec is not None:
            key = (job.jobspec, gpu_type, num_gpus, num_nodes, batch)
            if key not in self._rates:
                self._rates[key] = np.array([self.specs.spec_rate(
                    job, gpu_type, num_gpus, num_nodes, int(batch), self._gpn.get(gpu_type, 8))])
            return self._rates[key]
        if job.speedup is not None:  # moldable rental job: target is single-GPU seconds
            return np.array([float(job.speedup(float(num_gpus)))])
        if job.application is None:
            return np.array([min(1.0, num_gpus / job.num_gpus)])
        key = (job.application, gpu_type, num_gpus, num_nodes, batch)
        r = self._rates.get(key)
        if r is None:
            r = segment_rates(job.application, gpu_type, num_gpus, num_nodes, float(batch))
            self._rates[key] = r
        return r

    def layout(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int | None) -> str | None:
        """The parallel layout a job runs with on this placement: job-spec jobs' goodput object's choice;
        None for the data-parallel measured profiles and rigid jobs."""
        if job.jobspec is None or batch is None:
            return None
        return self.specs.spec_layout(job, gpu_type, num_gpus, num_nodes, int(batch), self._gpn.get(gpu_type, 8))

    def target(self, job) -> float:
        """Work of the job: iterations at the reference batch (applications), seconds on its
        request (rigid jobs), single-GPU seconds (moldable ``speedup`` jobs) or 1 (job specs)."""
        if job.jobspec is not None:
            return 1.0  # the whole job; rates are fractions of it per second
        return job.duration_s if job.application is None else app_profile(job.application).job_progress

    def assumptions(self, apps) -> list[str]:
        out = [app_profile(a).assumptions()[0] for a in sorted(apps)]
        out.append("other GPU types: compute time / sqrt(fp16 peak ratio x HBM bandwidth ratio) vs T4 and "
                   "per-GPU batch limit x memory ratio (gpus.csv); multi-GPU overhead as measured on T4 nodes")
        out.append("statistical efficiency: Pollux gain/scale from the measured gradient noise at the "
                   "reference batch, piecewise constant between validation rows")
        return out
