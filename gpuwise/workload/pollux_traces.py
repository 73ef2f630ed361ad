"""Loaders for the bundled Pollux (OSDI'21 artifact) application profiles.

Files under ``gpuwise/data/pollux/traces/<app>/`` (Apache-2.0, petuum/adaptdl `osdi21-artifact`):

- ``placements.csv``: placement, local_bsz, step_time, sync_time -- one row per measured
  (placement, per-GPU batch); ``placement`` has one digit per node = GPUs used on that node
  (``"1222"`` = 4 nodes, 7 GPUs). Times in seconds per optimizer step; ``sync_time`` is the
  gradient synchronisation time that was *not* hidden behind compute.
- ``scalability.csv``: num_nodes, num_replicas, local_bsz, step_time, sync_time (larger runs).
- ``validation-<global batch>.csv``: progress, iteration, metric, grad_sqr, grad_var -- training
  progress (samples processed scaled to the reference batch), the validation metric and the
  measured gradient statistics (squared norm of the true gradient, trace of its variance).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gpuwise.data import data_path
from gpuwise.errors import unknown_name

APPLICATIONS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


@dataclass(frozen=True)
class StepTimeRow:
    """One measured step time of a data-parallel job."""

    num_nodes: int        # nodes holding at least one replica
    num_replicas: int     # GPUs = data-parallel replicas
    local_bsz: int        # per-GPU batch of one micro-step
    step_time: float      # seconds per optimizer step
    sync_time: float      # seconds of exposed (non-overlapped) gradient synchronisation
    placement: str = ""   # one digit per node (empty for scalability rows)


@dataclass(frozen=True)
class ValidationRow:
    """One point of a training curve at a fixed global batch."""

    progress: float       # training progress in samples at the reference batch
    iteration: int        # optimizer steps taken so far
    metric: float         # validation metric (accuracy, BLEU-like score, loss, ... per app)
    grad_sqr: float       # |E[g]|^2 estimated by the Pollux gradient-noise-scale hooks
    grad_var: float       # tr(Var[g]) for a per-sample gradient (same hooks)


def _app_dir(app: str) -> Path:
    if app not in APPLICATIONS:
        raise unknown_name("application", app, APPLICATIONS)
    return data_path("pollux", "traces", app)


def parse_placement(placement: str) -> tuple[int, int]:
    """``"1222"`` -> (num_nodes=4, num_replicas=7)."""
    digits = [int(c) for c in str(placement).strip()]
    nodes = sum(1 for d in digits if d > 0)
    return nodes, sum(digits)


def load_placements(app: str) -> list[StepTimeRow]:
    """All rows of ``<app>/placements.csv`` in file order."""
    rows = []
    with open(_app_dir(app) / "placements.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            nodes, reps = parse_placement(r["placement"])
            rows.append(StepTimeRow(nodes, reps, int(r["local_bsz"]), float(r["step_time"]),
                                    float(r["sync_time"]), r["placement"].strip()))
    return rows


def load_scalability(app: str) -> list[StepTimeRow]:
    """All rows of ``<app>/scalability.csv`` in file order."""
    rows = []
    with open(_app_dir(app) / "scalability.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            rows.append(StepTimeRow(int(r["num_nodes"]), int(r["num_replicas"]), int(r["local_bsz"]),
                                    float(r["step_time"]), float(r["sync_time"])))
    return rows


def _validation_files(app: str) -> dict[int, Path]:
    """``{global_batch: path}`` of the app's ``validation-<bsz>.csv`` files, batches ascending."""
    return dict(sorted((int(p.stem.split("-", 1)[1]), p) for p in _app_dir(app).glob("validation-*.csv")))


def validated_batch_range(app: str) -> tuple[int, int]:
    """(smallest, largest) global batch with a recorded training curve: the app's batch range, the
    smallest being its reference batch M0 (read from the file names, no file is parsed)."""
    batches = list(_validation_files(app))
    return batches[0], batches[-1]


def load_validation(app: str) -> dict[int, list[ValidationRow]]:
    """``{global_batch: rows}`` from every ``validation-<bsz>.csv`` of the app, batches ascending."""
    out: dict[int, list[ValidationRow]] = {}
    for bsz, path in _validation_files(app).items():
        with open(path, newline="") as fh:
            out[bsz] = [ValidationRow(float(r["progress"]), int(float(r["iteration"])), float(r["metric"]),
                                      float(r["grad_sqr"]), float(r["grad_var"]))
                        for r in csv.DictReader(fh)]
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class AppInfo:
    """Per-application facts from ``gpuwise/data/calibration/pollux_apps.csv``."""

    app: str
    model_preset: str        # gpuwise model preset of the network
    dataset: str
    dataset_size: int        # samples per epoch
    metric: str
    higher_is_better: bool
    target: float            # metric value treated as "trained" (chosen so every bundled batch reaches it)

    def reached(self, value: float) -> bool:
        return value >= self.target if self.higher_is_better else value <= self.target


def load_app_info(app: str) -> AppInfo:
    _app_dir(app)
    with open(data_path("calibration", "pollux_apps.csv"), newline="") as fh:
        for r in csv.DictReader(fh):
            if r["app"] == app:
                return AppInfo(app, r["model_preset"], r["dataset"], int(r["dataset_size"]), r["metric"],
                               r["higher_is_better"].strip().lower() == "true", float(r["target"]))
    raise unknown_name("application", app, APPLICATIONS)


# --- which rows a <= 10-point fit is given (used by the job model and by validation) ---

# (placement, which local batch among the sorted ones measured for it): 0 = smallest, -1 = largest,
# "mid" = median. One GPU at three batch sizes, one node with 2 and 4 GPUs, then 1-GPU-per-node
# placements on 2, 3 and 4 nodes and one 2-GPU-per-node placement: what an elastic job sees first.
ONLINE_PLAN: tuple[tuple[str, int | str], ...] = (
    ("1", 0), ("1", "mid"), ("1", -1), ("2", "mid"), ("4", "mid"),
    ("11", 0), ("11", -1), ("111", "mid"), ("1111", "mid"), ("2222", "mid"),
)


# Design rule: (nodes, GPUs on each node, batch position) with "N" = most nodes profiled, "K" = most GPUs
# per node; the batch position q in [0, 1] picks the local batch at that quantile of the sizes measured
# for the placement (0 = smallest, 1 = largest). Placements: 1 GPU and one full node (compute curve,
# within-node all-reduce, overlap), 2 nodes with 1 and K GPUs each, 3 nodes with K, and the most nodes
# with 1 and K GPUs each (across-node all-reduce: level and GPUs-per-node slope on 2 nodes and above).
# Batch positions: 1 GPU at the two ends, the other eight points take the steps 1/9 ... 8/9 once each,
# so the ten points see up to ten distinct local batches (compute is not smooth in the batch on every
# application, e.g. YOLOv3). Only uniform placements (every node with the same GPU count) are used, so
# the rule needs no knowledge of a particular cluster's slow nodes. Compared with 8 other rules on the
# same profiles (see README section 2): a selection on the scored data.
DESIGN_PLAN: tuple[tuple[int | str, int | str, float], ...] = (
    (1, 1, 0.0), (1, 1, 1.0), (1, "K", 1 / 9), (1, "K", 8 / 9), (2, 1, 4 / 9),
    (2, "K", 5 / 9), (3, "K", 3 / 9), ("N", 1, 6 / 9), ("N", "K", 2 / 9), ("N", "K", 7 / 9),
)


def design_training_points(rows: list[StepTimeRow], max_points: int = 10) -> list[int]:
    """Indices (into ``rows``) of the <= max_points points of ``DESIGN_PLAN`` (missing ones skipped)."""
    placed = [r for r in rows if r.placement]
    if not placed:
        return []
    most_nodes = max(r.num_nodes for r in placed)
    most_per_node = max(int(c) for r in placed for c in r.placement)
    chosen: list[int] = []
    for nodes, per, q in DESIGN_PLAN:
        n = most_nodes if nodes == "N" else int(nodes)
        k = most_per_node if per == "K" else int(per)
        idx = [i for i, r in enumerate(rows) if r.num_nodes == n and r.placement and set(r.placement) == {str(k)}]
        if not idx:
            continue
        sizes = sorted({rows[i].local_bsz for i in idx})
        target = sizes[int(round(q * (len(sizes) - 1)))]
        i = next(i for i in idx if rows[i].local_bsz == target)
        if i not in chosen:
            chosen.append(i)
    return chosen[:max_points]


def online_training_points(rows: list[StepTimeRow], max_points: int = 10) -> list[int]:
    """Indices (into ``rows``) of the points an online fit would have after its first placements."""
    chosen: list[int] = []
    for placement, which in ONLINE_PLAN:
        idx = sorted((i for i, r in enumerate(rows) if r.placement == placement), key=lambda i: rows[i].local_bsz)
        if not idx:
            continue
        i = idx[len(idx) // 2] if which == "mid" else idx[int(which)]
        if i not in chosen:
            chosen.append(i)
    return chosen[:max_points]
