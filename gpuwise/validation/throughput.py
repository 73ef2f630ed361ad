"""Validation of the step-time models against measured throughput.

- Fitted models (``pollux``, ``extended`` and ``bottleneck`` forms, ``fits.FORMS``) on the bundled
  Pollux profiles: fit on <= 10 points, score on every other row. Two rules choose the points, neither
  looks at the held-out errors: the *design* rule (``DESIGN_PLAN``: profile the corners of the space
  first, as Scavenger profiles extreme configurations) and the *online* rule (``ONLINE_PLAN``: the
  first small placements an elastic job runs on).
- Analytical model (``gpuwise.estimate.step_time``) on Gavel's measured throughputs and Korthikanti
  et al.'s Megatron iteration times (see ``analytical_*`` functions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwise.workload.pollux_traces import (  # noqa: F401  (selection rules re-exported for callers)
    APPLICATIONS, DESIGN_PLAN, ONLINE_PLAN, StepTimeRow, design_training_points, load_placements,
    load_scalability, online_training_points,
)

POINT_RULES = ("design", "online")


def _cols(rows: list[StepTimeRow]) -> tuple[np.ndarray, ...]:
    a = np.array([(r.num_nodes, r.num_replicas, r.local_bsz, r.step_time, r.sync_time) for r in rows], float)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]


@dataclass
class FitScore:
    """Held-out error of one fitted form for one application and one point rule."""

    app: str
    train_points: int
    train_placements: list[str]
    heldout_points: int
    median_error: float        # median |pred - meas| / meas over held-out placements.csv rows
    max_error: float
    scalability_points: int
    scalability_median_error: float   # extrapolation to 6-64 GPUs (scalability.csv), never trained on
    params: dict[str, float] = field(default_factory=dict)
    floor_median_error: float = float("nan")  # in-sample median when fitted on *all* placements rows:
                                              # what the form can reach at best (nan if not computed)
    form: str = "pollux"                      # one of fits.FORMS
    rule: str = "online"                      # "design" | "online" (POINT_RULES)


def training_points(rows: list[StepTimeRow], rule: str, max_points: int = 10) -> list[int]:
    if rule == "design":
        return design_training_points(rows, max_points)
    if rule == "online":
        return online_training_points(rows, max_points)
    from gpuwise.errors import unknown_name

    raise unknown_name("point rule", rule, POINT_RULES)


def score_pollux_fit(app: str, max_points: int = 10, form: str = "pollux", rule: str = "online",
                     floor: bool = True) -> FitScore:
    """Fit ``form`` on the points of ``rule`` for ``app``, score every other placements.csv row and
    the scalability.csv rows; ``floor`` also fits on all rows (in-sample limit of the form)."""
    from gpuwise.estimate.fits import fit_form, relative_errors

    rows = load_placements(app)
    train = training_points(rows, rule, max_points)
    tr = [rows[i] for i in train]
    trained = set(train)
    test = [r for i, r in enumerate(rows) if i not in trained]
    n, r, b, t, s = _cols(tr)
    params = fit_form(form, n, r, b, t, s)
    tn, tr_, tb, tt, _ = _cols(test)
    err = relative_errors(params, tn, tr_, tb, tt)
    sc = load_scalability(app)
    sn, sr, sb, st, _ = _cols(sc)
    serr = relative_errors(params, sn, sr, sb, st)
    floor_err = float("nan")
    if floor:
        an, ar, ab, at, as_ = _cols(rows)
        full = fit_form(form, an, ar, ab, at, as_)
        floor_err = float(np.median(relative_errors(full, an, ar, ab, at)))
    return FitScore(app, len(tr), [f"{x.placement}@{x.local_bsz}" for x in tr], len(test),
                    float(np.median(err)), float(err.max()), len(sc), float(np.median(serr)),
                    params.as_dict(), floor_err, form, rule)


def score_all_pollux(max_points: int = 10, form: str = "pollux", rule: str = "online",
                     floor: bool = True) -> list[FitScore]:
    return [score_pollux_fit(app, max_points, form, rule, floor) for app in APPLICATIONS]


# ---------------------------------------------------------------------------------------------
# Analytical model vs measurements

GAVEL_GPUS = {"k80": "K80", "p100": "P100", "v100": "V100"}
# Gavel job types whose model gpuwise has a preset for (absolute and scaling checks)
GAVEL_PRESETS = {"ResNet-50": "resnet50", "ResNet-18": "resnet18-cifar10"}


@dataclass
class Comparison:
    """One predicted vs measured value."""

    source: str        # "korthikanti-tab5" | "gavel-cross-gpu" | "gavel-scaling"
    case: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return abs(self.predicted - self.measured) / self.measured


def _gavel() -> dict:
    import json

    from gpuwise.data import data_path

    with open(data_path("gavel", "simulation_throughputs.json")) as fh:
        return json.load(fh)


def korthikanti_comparisons() -> list[Comparison]:
    """Megatron iteration times (Korthikanti et al. 2022, Table 5; A100-80GB on Selene, bf16) vs the per-op
    roofline model (the same runs as ``steptime_fit.measured_runs``, where they are fit rows)."""
    from gpuwise.validation.steptime_fit import measured_runs, predict

    out = []
    for run in measured_runs():
        if run.source != "korthikanti-tab5":
            continue
        measured_s = run.cfg.global_batch() * run.cfg.seq_len / (run.tokens_per_s_per_gpu * run.cfg.plan.gpus)
        pred_s = measured_s * run.tokens_per_s_per_gpu / predict(run)
        out.append(Comparison("korthikanti-tab5", run.case, measured_s, pred_s))
    return out


def _gavel_throughput(d: dict, gpu_key: str, job: str, bs: int, n: int) -> float | None:
    v = d.get(gpu_key, {}).get(f"('{job} (batch size {bs})', {n})", {}).get("null")
    return float(v) if v else None


def gavel_comparisons() -> list[Comparison]:
    """Gavel (Narayanan et al. OSDI'20) measured steps/s vs analytical (fp32, one 8-GPU server):
    - cross-GPU ratios P100/K80 and V100/K80 at 1 GPU for every job type and batch size with a
      large-problem ratio (efficiency-limited regime: model FLOPs cancel, so any job type can be used);
    - absolute single-GPU steps/s and 1->2/4/8 GPU data-parallel scaling for the job types gpuwise has
      presets for (ResNet-50, ResNet-18)."""
    from gpuwise.estimate.efficiency import compute_unit, efficiency_for
    from gpuwise.estimate.step_time import analytical_step_time
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    d = _gavel()
    out: list[Comparison] = []
    gpus = {k: get_gpu(v) for k, v in GAVEL_GPUS.items()}
    rate = {}
    for k, g in gpus.items():
        unit, peak = compute_unit(g, "fp32")
        rate[k] = efficiency_for(g, unit).e_max * peak
    jobs = sorted({key.split(" (batch size")[0].strip("('") for key in d["k80"] if "batch size" in key})
    for job in jobs:
        preset = GAVEL_PRESETS.get(job)
        model = load_model(preset) if preset else None
        for bs in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
            base = _gavel_throughput(d, "k80", job, bs, 1)
            if not base:
                continue
            for other in ("p100", "v100"):
                val = _gavel_throughput(d, other, job, bs, 1)
                if not val:
                    continue
                if model is None:
                    # no preset: only the large-problem rate ratio (regime check, reported apart)
                    out.append(Comparison("gavel-cross-gpu-other-jobs", f"{job} bs{bs} {other}/k80", val / base,
                                          rate[other] / rate["k80"]))
                    continue
                cfg1 = TrainingConfig(micro_batch=bs, precision="fp32", plan=ParallelPlan())
                t_k80 = analytical_step_time(model, cfg1, gpus["k80"], 8).step_time_s
                t_o = analytical_step_time(model, cfg1, gpus[other], 8).step_time_s
                out.append(Comparison("gavel-cross-gpu", f"{job} bs{bs} {other}/k80", val / base, t_k80 / t_o))
    for job, preset in GAVEL_PRESETS.items():
        model = load_model(preset)
        for key, g in gpus.items():
            for bs in (16, 32, 64, 128, 256):
                one = _gavel_throughput(d, key, job, bs, 1)
                if not one:
                    continue
                cfg1 = TrainingConfig(micro_batch=bs, precision="fp32", plan=ParallelPlan())
                t1 = analytical_step_time(model, cfg1, g, 8).step_time_s
                if job == "ResNet-50":
                    out.append(Comparison("gavel-absolute", f"{job} bs{bs} {key} steps/s", one, 1.0 / t1))
                for n in (2, 4, 8):
                    many = _gavel_throughput(d, key, job, bs, n)
                    if not many:
                        continue
                    cfg = TrainingConfig(micro_batch=bs, precision="fp32", plan=ParallelPlan(dp=n))
                    tn = analytical_step_time(model, cfg, g, 8).step_time_s
                    # Gavel counts steps of all workers: per-GPU scaling efficiency = thr(n) / (n thr(1))
                    out.append(Comparison("gavel-scaling", f"{job} bs{bs} {key} x{n}", many / (n * one), t1 / tn))
    return out


def published_rows() -> list[dict]:
    """Rows of gpuwise/data/calibration/published_throughput.csv (published training throughputs)."""
    from gpuwise.data import data_path, read_commented_csv

    return read_commented_csv(data_path("calibration", "published_throughput.csv"))


def nvidia_rn50_comparisons() -> list[Comparison]:
    """NVIDIA DeepLearningExamples ResNet-50 v1.5 training images/s (A100 80GB, V100 16/32GB; AMP,
    TF32, FP32; 1 and 8 GPUs of one DGX) vs the analytical model (roofline for explicit models)."""
    from gpuwise.estimate.step_time import analytical_step_time
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    out = []
    for r in published_rows():
        n, b = int(r["gpus"]), int(r["batch_per_gpu"])
        cfg = TrainingConfig(micro_batch=b, precision=r["precision"], plan=ParallelPlan(dp=n))
        est = analytical_step_time(load_model(r["model"]), cfg, get_gpu(r["gpu"]), 8)
        tag = " (calibration point)" if r["calibration"] == "yes" else ""
        out.append(Comparison("nvidia-rn50", f"{r['model']} {r['gpu']} x{n} {r['precision']}{tag}",
                              float(r["images_per_s"]), est.samples_per_s))
    return out


def calibrate_roofline(images_per_s: float, batch: int, model_name: str = "resnet50", gpu_name: str = "A100-80GB",
                       precision: str = "fp16-mixed") -> float:
    """Traffic ratio of calibration/roofline.csv from one measured single-GPU throughput: the memory
    time per sample = step time - t0 - optimizer update, times HBM bandwidth, over the activation bytes."""
    from gpuwise.estimate.efficiency import COMPUTE_DTYPE, compute_unit, efficiency_for
    from gpuwise.estimate.step_time import analytical_step_time
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.workload.models import load_model
    from gpuwise.workload.training import ParallelPlan, TrainingConfig

    model, gpu = load_model(model_name), get_gpu(gpu_name)
    est = analytical_step_time(model, TrainingConfig(micro_batch=batch, precision=precision, plan=ParallelPlan()),
                               gpu, 8)
    t0 = efficiency_for(gpu, compute_unit(gpu, precision)[0]).t0_s
    t_mem = batch / images_per_s - t0 - est.optimizer_s
    value = 4.0 if COMPUTE_DTYPE.get(precision, "bf16") in ("fp32", "tf32") else 2.0
    return t_mem / batch * gpu.hbm_gbps * 1e9 / (model.activation_bytes_per_sample * value / 4.0)


HEADLINE_SOURCES = ("korthikanti-tab5", "gavel-absolute", "gavel-cross-gpu", "gavel-scaling", "nvidia-rn50")


def summarize(comps: list[Comparison]) -> dict[str, dict[str, float]]:
    """Median and max relative error and count per source, plus 'all' over HEADLINE_SOURCES (job types
    with a gpuwise model preset; other Gavel job types only check the efficiency ratio and are apart)."""
    groups: dict[str, list[float]] = {}
    for c in comps:
        groups.setdefault(c.source, []).append(c.error)
    groups["all"] = [c.error for c in comps if c.source in HEADLINE_SOURCES]
    return {k: {"median_error": float(np.median(v)), "max_error": float(np.max(v)), "points": len(v)}
            for k, v in groups.items() if v}


def calibrate_efficiency(flops_per_step, step_time_s, peak_flops, fixed_s=0.0) -> tuple[float, float]:
    """Least-squares (e_max, t0) of time = t0 + FLOPs/(e_max*peak) from measured single-GPU steps;
    ``fixed_s`` (e.g. the optimizer update) is subtracted first. How the rows of
    gpuwise/data/calibration/efficiency.csv with points > 0 were obtained."""
    f = np.asarray(flops_per_step, float)
    t = np.asarray(step_time_s, float) - fixed_s
    X = np.column_stack([np.ones_like(f), f])
    (t0, slope), *_ = np.linalg.lstsq(X, t, rcond=None)
    return float(1.0 / (slope * peak_flops)), float(t0)
