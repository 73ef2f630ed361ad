"""Simulation vs reality: replay a finished run's jobs in the simulator with the speed models the
run measured, and compare each job's simulated JCT with its measured one.

The replay uses the same policy (a fresh instance), the same cluster and arrival times, the final
measured model of every job as ground truth (`MeasuredPerf`, one constant rate per allocation, with the effective noise scale of
the steps the job trained), the run's faults at their times (losing the steps the run lost), the nodes
it lost (their GPUs gone from then on) and,
as the per-allocation-change overhead, the mean measured time from a reservation to the job
training again (boundary wait + teardown + process-group set-up + checkpoint load). A fault's
recovery beyond that overhead (its workers restart: a new process that re-imports torch) is measured
too -- fault to training again -- and the replayed job trains no earlier than that after its fault.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from gpuwise.runtime.driver import RunResult
from gpuwise.runtime.measured import MeasuredPerf


def replay(cluster, workload, make_policy, run: RunResult) -> dict[str, float | None]:
    """Simulated JCT of every job (None if it did not finish in the simulation)."""
    from gpuwise.sim.cluster import ClusterSimulator

    models = {n: replace(jr.model, phi_override=jr.model.effective_phi(jr.js.progress), fitter=None, _pending=None)
              for n, jr in run.runs.items()}
    faults = sorted((e["t"], n, e["lost_steps"] * float(models[n].gain(e.get("batch") or jr.js.job.batch_size)),
                     _recovery_s(jr, i))
                    for n, jr in run.runs.items() for i, e in enumerate(jr.events) if e["kind"] == "fault")
    sim = ClusterSimulator(cluster, workload, make_policy(), restart_s=run.sim.restart_s,
                           truth=MeasuredPerf(models), faults=faults,
                           node_losses=[(n["t"], n["node"]) for n in run.lost_nodes]).run()
    return {js.name: (js.finish_s - js.submitted_s) if js.status == "done" else None for js in sim.jobs}


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


def compare(run: RunResult, simulated: dict[str, float | None]) -> tuple[list[dict], float | None]:
    """Per job: measured and simulated JCT and the relative error; and the median error."""
    rows, errs = [], []
    for jr in run.runs.values():
        js = jr.js
        measured = (js.finish_s - js.submitted_s) if js.status == "done" else None
        sim = simulated.get(jr.name)
        err = abs(sim - measured) / measured if measured and sim is not None else None
        if err is not None:
            errs.append(err)
        rows.append({"name": jr.name, "measured_jct_s": measured, "simulated_jct_s": sim, "jct_error": err})
    return rows, (statistics.median(errs) if errs else None)
