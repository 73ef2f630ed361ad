"""Simulation vs reality: replay a finished run's jobs in the simulator with the speed models the
run measured, and compare each job's simulated JCT with its measured one.

Three replays, three questions:

* the policy replay (the headline, ``simulated_jct_s``): the same policy (a fresh instance), the
  same cluster and arrival times, the final measured model of every job as ground truth
  (`MeasuredTruth`: one constant rate per allocation, with the effective noise scale of the steps the
  job trained; at a configuration the run measured, its mean measured step time; elsewhere the
  final Pollux fit's -- the fit weighs each configuration's mean once, however long the job ran
  there, and its form has no term for what else runs on the shared cores), the run's faults at their times (losing the steps the run lost), the nodes it lost
  (their GPUs gone from then on). Its policy sees, at each time, each job's model as the run's
  policy read it at its latest round by then (`JobRun.seen`: the prior before the first chunk, then
  the fits as they evolved), so it takes the run's kind of decisions on the run's knowledge.
* the oracle-view policy replay (``oracle_view_jct_s``): the same, but its policy sees the final
  models from t=0 (as `gpuwise simulate` does): it decides with knowledge the run never had.
  Overheads: each job's first start costs what the run measured for it (reservation -> training:
  the first launch of a script imports its libraries); every later allocation change costs the mean
  measured dead time of the run's rescales (last chunk boundary -> training again: teardown,
  process-group set-up, checkpoint load). A fault's recovery (its workers restart) is measured
  too -- fault to training again -- and the replayed job trains no earlier than that after its fault.
* the same-decisions replay (``same_decisions_jct_s``): the run's own allocation timeline, its
  measured time outside chunks (waits, set-ups, faults) kept, each chunk's measured wall time
  replaced by the final Pollux fit's step time for that chunk's configuration. It isolates the
  fit's error -- a consistency check: the fit was made on these very chunks (in-sample).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from gpuwise.runtime.driver import RunResult
from gpuwise.runtime.measured import MeasuredPerf
from gpuwise.sim.cluster import ClusterSimulator


@dataclass
class Replayed:
    jct: dict[str, float | None]           # simulated JCT per job (None: unfinished in the simulation)
    oracle_jct: dict[str, float | None]    # the same with the final models seen from t=0
    allocations: dict[str, list[dict]]     # per job: the replay's allocations over time
    restart_s: float                       # charged per allocation change after the first start
    first_start_s: dict[str, float]        # charged for each job's first start


class MeasuredTruth(MeasuredPerf):
    """The replay's ground truth: `MeasuredPerf`'s rates, with the step time at a configuration the
    run measured (nodes, GPUs, local batch) set to its mean measured chunk wall time per step."""

    def rates(self, job, gpu_type: str, num_gpus: int, num_nodes: int, batch: int | None):
        r = super().rates(job, gpu_type, num_gpus, num_nodes, batch)
        jm = self.models[job.name]
        local = float(batch or job.batch_size) / num_gpus
        steps = [p[3] for p in jm.points if (p[0], p[1]) == (num_nodes, num_gpus) and abs(p[2] - local) < 1e-9]
        if not steps:
            return r
        return r * float(jm.step_time(num_nodes, num_gpus, local)) / (sum(steps) / len(steps))


class _Recording(ClusterSimulator):
    """The simulator, keeping each job's allocations (to set beside the run's start/rescale events)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timeline: dict[str, list[dict]] = {}

    def start(self, js, alloc, now: float) -> None:
        super().start(js, alloc, now)
        self.timeline.setdefault(js.name, []).append(
            {"t": round(now, 3), "kind": "start", "gpu_type": alloc.gpu_type, "gpus": alloc.num_gpus,
             "nodes": alloc.num_nodes, "batch": alloc.batch_size, "trains_from": round(js.run_from, 3)})

    def stop(self, js, now: float) -> None:
        super().stop(js, now)
        self.timeline.setdefault(js.name, []).append({"t": round(now, 3), "kind": "stop"})


class AsSeen(MeasuredPerf):
    """What the run's policy read: each job's model as of the run's latest round at or before the
    simulator's time ``now()`` (its first snapshot before that); jobs without snapshots: the final model."""

    def __init__(self, models: dict, seen: dict[str, list[tuple]], now=lambda: 0.0) -> None:
        super().__init__(models)
        self.seen, self.now = seen, now

    def model(self, job):
        final, hist = self.models[job.name], self.seen.get(job.name)
        if not hist:
            return final
        t = self.now()
        snap = next((s for s in reversed(hist) if s[0] <= t), hist[0])
        return replace(final, params=snap[1], phi_override=snap[2])

    def describe(self) -> str:
        return "policies see each job's model as the run's policy read it at the same time (the run's rounds)"


def replay(cluster, workload, make_policy, run: RunResult) -> Replayed:
    """The policy replays of ``run`` (see the module docstring)."""
    models = {n: replace(jr.model, phi_override=jr.model.effective_phi(jr.js.progress), fitter=None, _pending=None)
              for n, jr in run.runs.items()}
    faults = sorted((e["t"], n, e["lost_steps"] * float(models[n].gain(e.get("batch") or jr.js.job.batch_size)),
                     _recovery_s(jr, i))
                    for n, jr in run.runs.items() for i, e in enumerate(jr.events) if e["kind"] == "fault")
    first = {n: jr.overheads[0] for n, jr in run.runs.items() if jr.overheads}
    dead = [x for jr in run.runs.values() for x in rescale_dead_s(jr)]
    restart_s = statistics.mean(dead) if dead else run.sim.restart_s
    kw = {"restart_s": restart_s, "truth": MeasuredTruth(models), "faults": faults, "first_start_s": first,
          "node_losses": [(n["t"], n["node"]) for n in run.lost_nodes]}
    view = AsSeen(models, {n: jr.seen for n, jr in run.runs.items()})
    sim = _Recording(cluster, workload, make_policy(), policy_perf=view, **kw)
    view.now = sim.now
    oracle = ClusterSimulator(cluster, workload, make_policy(), **kw).run()
    return Replayed(_jcts(sim.run()), _jcts(oracle), sim.timeline, restart_s, first)


def _jcts(res) -> dict[str, float | None]:
    return {js.name: (js.finish_s - js.submitted_s) if js.status == "done" else None for js in res.jobs}


def rescale_dead_s(jr) -> list[float]:
    """Per rescale of ``jr``: seconds from its last chunk boundary before the rescale to training again
    (the old allocation trains until that boundary; from it to the new group's start nothing trains)."""
    out = []
    for e in jr.events:
        if e["kind"] != "rescale":
            continue
        ends = [t for t, _ in jr.chunks if t <= e["t"]]
        if ends:
            out.append(e["t"] - ends[-1])
    return out


def same_decisions_jct(jr) -> float | None:
    """JCT on the run's own decisions with the final model's step times (see the module docstring);
    None if the job did not finish or its chunks were not all recorded (a resumed run)."""
    js, pts = jr.js, jr.model.points
    if js.status != "done" or not pts or len(pts) != len(jr.chunks):
        return None
    measured = sum(n * p[3] for p, (_, n) in zip(pts, jr.chunks))
    predicted = sum(n * float(jr.model.step_time(*p[:3])) for p, (_, n) in zip(pts, jr.chunks))
    return js.finish_s - js.submitted_s - measured + predicted


def _recovery_s(jr, i: int) -> float:
    """Measured recovery of fault ``jr.events[i]``: seconds until the job trained again (its workers
    restart: a fresh process re-imports torch), counted at the first fault of a series (a second
    fault while the job waits to restart finds nothing running, in the run as in the replay)."""
    runs = ("start", "rescale", "fault")
    before = next((e for e in reversed(jr.events[:i]) if e["kind"] in runs), None)
    back = next((e for e in jr.events[i + 1:] if e["kind"] in runs[:2]), None)
    if back is None or (before is not None and before["kind"] == "fault"):
        return 0.0
    return back["t"] - jr.events[i]["t"]


def _error(sim: float | None, measured: float | None) -> float | None:
    return abs(sim - measured) / measured if measured and sim is not None else None


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def compare(run: RunResult, replayed: Replayed) -> tuple[list[dict], dict[str, float | None]]:
    """Per job: measured, simulated, oracle-view and same-decisions JCT with their relative errors;
    and the median error of each (``jct_median_error``: the policy replay, the headline)."""
    rows = []
    for jr in run.runs.values():
        js = jr.js
        measured = (js.finish_s - js.submitted_s) if js.status == "done" else None
        sim, same, oracle = replayed.jct.get(jr.name), same_decisions_jct(jr), replayed.oracle_jct.get(jr.name)
        rows.append({"name": jr.name, "measured_jct_s": measured, "simulated_jct_s": sim,
                     "jct_error": _error(sim, measured), "oracle_view_jct_s": oracle,
                     "oracle_view_jct_error": _error(oracle, measured), "same_decisions_jct_s": same,
                     "same_decisions_jct_error": _error(same, measured),
                     "replay_first_start_s": replayed.first_start_s.get(jr.name),
                     "replay_allocations": replayed.allocations.get(jr.name, [])})
    return rows, {"jct_median_error": _median([r["jct_error"] for r in rows]),
                  "jct_median_error_oracle_view": _median([r["oracle_view_jct_error"] for r in rows]),
                  "jct_median_error_same_decisions": _median([r["same_decisions_jct_error"] for r in rows])}
