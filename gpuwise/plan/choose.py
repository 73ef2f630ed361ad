"""Picking one candidate by the user's objective, and naming the binding constraint when none fits.

Objectives over candidates with expected time T (hours) and expected cost C (USD):
- cost: min C; with `cost_tie` > 0, costs within that fraction of the minimum are a tie, and the
  fastest of them wins (then the fewest nodes, i.e. larger nodes, then the earlier row): a 1% saving is
  within the price and time models' error, an hour or a node less is not;
- time: min T (ties: cheaper, then earlier row);
- knee: Kneedle knee of the time/cost Pareto front (Scavenger's choice, papers.md B.3);
- deadline: the cheapest candidate that meets the deadline with probability >= `confidence`
  (on-demand: T <= deadline; spot: the preemption-aware probability of finishing in time).
"""

from __future__ import annotations

import numpy as np

from gpuwise.plan.knee import knee_of_front
from gpuwise.plan.pareto import pareto_front

OBJECTIVES = ("cost", "time", "knee", "deadline")
DEFAULT_CONFIDENCE = 0.9   # deadline objective: required probability of finishing in time
COST_TIE = 0.01            # the planner's cost tie: within 1% of the cheapest is as cheap


def _lex_min(primary: np.ndarray, secondary: np.ndarray, mask: np.ndarray | None = None) -> int | None:
    idx = np.arange(primary.size) if mask is None else np.flatnonzero(mask)
    if idx.size == 0:
        return None
    order = np.lexsort((idx, secondary[idx], primary[idx]))
    return int(idx[order[0]])


def _cheapest(cost: np.ndarray, time_h: np.ndarray, mask: np.ndarray | None, tie: float,
              nodes: np.ndarray | None) -> int | None:
    """Min cost; with tie > 0 the fastest (then fewest nodes) of the rows within (1 + tie) x the minimum."""
    if tie <= 0:
        return _lex_min(cost, time_h, mask)
    idx = np.arange(cost.size) if mask is None else np.flatnonzero(mask)
    if idx.size == 0:
        return None
    idx = idx[cost[idx] <= cost[idx].min() * (1 + tie)]
    n = np.zeros(idx.size) if nodes is None else np.asarray(nodes)[idx]
    return int(idx[np.lexsort((idx, n, time_h[idx]))[0]])


def choose(time_h: np.ndarray, cost: np.ndarray, objective: str, *,
           deadline_prob: np.ndarray | None = None, confidence: float = DEFAULT_CONFIDENCE,
           front: np.ndarray | None = None, cost_tie: float = 0.0, nodes: np.ndarray | None = None) -> int | None:
    """Row index of the chosen candidate, or None when nothing qualifies (deadline objective).

    deadline_prob: per candidate, probability of finishing by the deadline (deadline objective).
    front: precomputed Pareto front indices (knee objective), else computed here.
    cost_tie, nodes: the cost and deadline objectives' tie rule (see the module docstring).
    """
    time_h = np.asarray(time_h, float)
    cost = np.asarray(cost, float)
    if objective == "cost":
        return _cheapest(cost, time_h, None, cost_tie, nodes)
    if objective == "time":
        return _lex_min(time_h, cost)
    if objective == "knee":
        f = pareto_front(time_h, cost) if front is None else np.asarray(front)
        if f.size == 0:
            return None
        return int(f[knee_of_front(time_h[f], cost[f])])
    if objective == "deadline":
        if deadline_prob is None:
            raise ValueError("deadline objective needs deadline_prob")
        return _cheapest(cost, time_h, np.asarray(deadline_prob) >= confidence, cost_tie, nodes)
    raise ValueError(f"objective must be one of {OBJECTIVES}")
