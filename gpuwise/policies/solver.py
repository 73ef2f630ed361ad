"""The job x configuration assignment that Sia and the MILP policy solve, with HiGHS's outcome kept.

`solve_assignment` picks at most one (GPU type, GPUs, score) option per job, maximising the summed
score within each GPU type's capacity, as a binary program solved by HiGHS (`scipy.optimize.milp`).
Every solve is recorded in a `SolverLog` (HiGHS's status, message and MIP gap), so that a round
that hit its time limit is reported instead of used silently. Fallback rule when HiGHS does not
prove optimality (time or node limit, or any other non-optimal status): the greedy assignment
(`greedy_assignment`: jobs in the order given -- running first, then by arrival -- each takes its
highest-scoring option that still fits), or HiGHS's own incumbent where it has one that scores at
least as much.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass, field

import numpy as np

Option = tuple[str, int, float]  # (GPU type, GPUs, objective score)

FALLBACK_RULE = ("a solve HiGHS does not prove optimal (time limit, node limit, other status) falls "
                 "back to the greedy rule -- jobs in order, running first, each takes its best-scoring "
                 "option that still fits -- or to HiGHS's incumbent where that scores at least as much")

# scipy.optimize.milp's `status` codes (scipy >= 1.9)
_STATUS = {0: "optimal", 1: "limit", 2: "infeasible", 3: "unbounded", 4: "other"}


@dataclass(frozen=True)
class SolveOutcome:
    """What HiGHS answered for one round, and what the policy used."""

    status: str                  # optimal | time_limit | node_limit | limit | infeasible | unbounded | other
    message: str                 # HiGHS's message, as scipy reports it
    mip_gap: float | None        # relative MIP gap of the solution returned (None: no solution)
    used: str                    # highs | incumbent | greedy: whose assignment the round applied


def _status_name(code: int, message: str) -> str:
    name = _STATUS.get(int(code), "other")
    low = message.lower()
    if name == "limit" or name == "other":   # HiGHS says which limit in the message
        for key, what in (("time limit", "time_limit"), ("node limit", "node_limit"),
                          ("solution limit", "node_limit"), ("iteration limit", "iteration_limit")):
            if key in low:
                return what
    return name


@dataclass
class SolverLog:
    """Every solve of one policy instance (one simulation or one service run)."""

    outcomes: list[SolveOutcome] = field(default_factory=list)

    def record(self, outcome: SolveOutcome) -> None:
        self.outcomes.append(outcome)
        del self.outcomes[:-10000]            # a long-running service keeps the recent rounds

    def summary(self) -> dict:
        """Rounds by HiGHS status, the rounds that fell back, and the worst MIP gap returned."""
        by: dict[str, int] = {}
        for o in self.outcomes:
            by[o.status] = by.get(o.status, 0) + 1
        gaps = [o.mip_gap for o in self.outcomes if o.mip_gap is not None]
        last = self.outcomes[-1] if self.outcomes else None
        return {"rounds": len(self.outcomes), "by_status": by,
                "not_optimal": sum(o.status != "optimal" for o in self.outcomes),
                "fallback_rounds": sum(o.used != "highs" for o in self.outcomes),
                "worst_mip_gap": max(gaps) if gaps else None,
                "last": None if last is None else {"status": last.status, "message": last.message,
                                                   "mip_gap": last.mip_gap, "used": last.used},
                "fallback_rule": FALLBACK_RULE}


@contextlib.contextmanager
def quiet_stdout():
    """HiGHS prints some MIP diagnostics straight to file descriptor 1, which would corrupt
    `--json` output: point fd 1 at /dev/null while the solver runs."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # captured / not a real file
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def greedy_assignment(options: list[list[Option]], capacity: dict[str, int]) -> list[int | None]:
    """Jobs in order, each takes its highest-scoring option with a positive score that still fits."""
    left = dict(capacity)
    out: list[int | None] = []
    for opts in options:
        pick = None
        for k in sorted(range(len(opts)), key=lambda k: -opts[k][2]):
            t, n, s = opts[k]
            if s > 0 and n <= left.get(t, 0):
                pick = k
                left[t] -= n
                break
        out.append(pick)
    return out


def _score(options: list[list[Option]], picks: list[int | None]) -> float:
    return sum(opts[k][2] for opts, k in zip(options, picks) if k is not None)


def solve_assignment(options: list[list[Option]], capacity: dict[str, int], time_limit_s: float = 10.0,
                     log: SolverLog | None = None, node_limit: int | None = None) -> list[int | None]:
    """Index into ``options[j]`` chosen for each job (None = no GPUs), maximising the summed score
    within each type's capacity; HiGHS's outcome goes to ``log`` (the fallback rule above applies
    when it is not optimal)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    cols = [(j, k) for j, opts in enumerate(options) for k in range(len(opts))]
    if not cols:
        return [None] * len(options)
    types = list(capacity)
    rows, cidx, vals, score = [], [], [], np.empty(len(cols))
    for c, (j, k) in enumerate(cols):
        t, n, s = options[j][k]
        rows += [j, len(options) + types.index(t)]
        cidx += [c, c]
        vals += [1.0, float(n)]
        score[c] = s
    a = coo_matrix((vals, (rows, cidx)), shape=(len(options) + len(types), len(cols))).tocsr()
    ub = np.concatenate([np.ones(len(options)), [capacity[t] for t in types]])
    opts = {"time_limit": time_limit_s, "disp": False}
    if node_limit is not None:
        opts["node_limit"] = int(node_limit)
    with quiet_stdout():
        res = milp(c=-score, constraints=LinearConstraint(a, -np.inf, ub), integrality=np.ones(len(cols)),
                   bounds=Bounds(0, 1), options=opts)
    picks: list[int | None] = [None] * len(options)
    if res.x is not None:
        for c in np.flatnonzero(res.x > 0.5):
            j, k = cols[c]
            picks[j] = k
    status = _status_name(res.status, str(res.message))
    used = "highs"
    if status != "optimal":
        greedy = greedy_assignment(options, capacity)
        if res.x is not None and _score(options, picks) >= _score(options, greedy):
            used = "incumbent"
        else:
            picks, used = greedy, "greedy"
    if log is not None:
        gap = getattr(res, "mip_gap", None)
        log.record(SolveOutcome(status, str(res.message), None if res.x is None or gap is None else float(gap),
                                used))
    return picks
