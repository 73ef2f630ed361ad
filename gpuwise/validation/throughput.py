"""Validation of the step-time models against measured throughput.

- Fitted model (Pollux form, ``gpuwise.estimate.pollux_fit``) on the bundled Pollux profiles: fit on
  <= 10 points chosen the way an online system gathers them (a job starts on one GPU, tries a few
  batch sizes, then grows to a few small placements), score on every other row.
- Analytical model (``gpuwise.estimate.step_time``) on Gavel's measured throughputs and Korthikanti
  et al.'s Megatron iteration times (see ``analytical_*`` functions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuwise.workload.pollux_traces import APPLICATIONS, StepTimeRow, load_placements, load_scalability

# (placement, which local batch among the sorted ones measured for it): 0 = smallest, -1 = largest,
# "mid" = median. One GPU at three batch sizes, one node with 2 and 4 GPUs, then 1-GPU-per-node
# placements on 2, 3 and 4 nodes and one 2-GPU-per-node placement: what an elastic job sees first.
ONLINE_PLAN: tuple[tuple[str, int | str], ...] = (
    ("1", 0), ("1", "mid"), ("1", -1), ("2", "mid"), ("4", "mid"),
    ("11", 0), ("11", -1), ("111", "mid"), ("1111", "mid"), ("2222", "mid"),
)


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


def _cols(rows: list[StepTimeRow]) -> tuple[np.ndarray, ...]:
    a = np.array([(r.num_nodes, r.num_replicas, r.local_bsz, r.step_time, r.sync_time) for r in rows], float)
    return a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]


@dataclass
class FitScore:
    """Held-out error of the Pollux fit for one application."""

    app: str
    train_points: int
    train_placements: list[str]
    heldout_points: int
    median_error: float        # median |pred - meas| / meas over held-out placements.csv rows
    max_error: float
    scalability_points: int
    scalability_median_error: float   # extrapolation to 6-64 GPUs (scalability.csv), never trained on
    params: dict[str, float] = field(default_factory=dict)


def score_pollux_fit(app: str, max_points: int = 10) -> FitScore:
    from gpuwise.estimate.pollux_fit import fit_pollux, relative_errors

    rows = load_placements(app)
    train = online_training_points(rows, max_points)
    tr = [rows[i] for i in train]
    test = [r for i, r in enumerate(rows) if i not in set(train)]
    n, r, b, t, s = _cols(tr)
    params = fit_pollux(n, r, b, t, s)
    tn, tr_, tb, tt, _ = _cols(test)
    err = relative_errors(params, tn, tr_, tb, tt)
    sc = load_scalability(app)
    sn, sr, sb, st, _ = _cols(sc)
    serr = relative_errors(params, sn, sr, sb, st)
    return FitScore(app, len(tr), [f"{x.placement}@{x.local_bsz}" for x in tr], len(test),
                    float(np.median(err)), float(err.max()), len(sc), float(np.median(serr)),
                    params.as_dict())


def score_all_pollux(max_points: int = 10) -> list[FitScore]:
    return [score_pollux_fit(app, max_points) for app in APPLICATIONS]
