"""`execute`: run a workload for real, replay it in the simulator, and build the output dict
(the keys of `gpuwise simulate --json` plus rescales, restarts, lost_steps and per-job records)."""

from __future__ import annotations

from contextlib import nullcontext

from gpuwise.control.status import TERMINAL
from gpuwise.runtime.driver import RunOptions, RunResult, run_workload
from gpuwise.runtime.measured import MeasuredPerf


def execute(cluster, workload, policy_name: str, opts: RunOptions, live: bool = False, pool=None,
            make=None) -> dict:
    """``make``: builds a fresh policy (default: the registry's ``policy_name``), called once for
    the run and once for the replay; ``pool``: started workers to reuse."""
    from gpuwise.policies.registry import make_policy
    from gpuwise.runtime.replay import compare, replay
    from gpuwise.sim.metrics import series, summarise

    make = make or (lambda: at_time_scale(make_policy(policy_name), opts.round_s))
    policy = make()
    with _progress(live, opts) as _:
        run = run_workload(cluster, workload, policy, opts, pool)
    replayed = replay(cluster, workload, make, run)
    rows, medians = compare(run, replayed)
    out = summarise(run.sim)
    for key in ("per_job", "utilisation_by_type", "fairness"):   # recorded by the simulator only; the
        out.pop(key)                                              # run's own per-job records are `jobs`
    out.update(workload=workload.source, workload_format=workload.format,
               rescales=sum(jr.rescales for jr in run.runs.values()),
               restarts=sum(jr.faults for jr in run.runs.values()),
               lost_steps=sum(jr.lost_steps for jr in run.runs.values()),
               preemptions_injected=run.preemptions, preemptions_skipped=run.preemptions_skipped,
               checkpoint_interval_steps=opts.chunk_steps, lost_nodes=run.lost_nodes,
               ray_start_s=run.startup_s, resumed=run.resumed, devices=run.devices, **medians,
               allocation_changes=out.pop("restarts"),
               measurements=str(opts.state_dir / "measurements.csv"))   # per chunk: `gpuwise validate runs`
    out["jobs"] = [{**row, **_job(jr)} for row, jr in zip(rows, run.runs.values())]
    out["jobs_unfinished"] = sum(jr.js.status not in TERMINAL for jr in run.runs.values())
    out["assumptions"] = _assumptions(run, opts, policy, replayed)
    out["_series"] = series(run.sim)
    return out


def at_time_scale(policy, round_s: float | None):
    """The policy with its round cadence set to ``round_s``: `simulate`'s defaults (a round at most
    every minute, a periodic one every 5 min) suit jobs of hours; real runs here last minutes."""
    if round_s is None:
        return policy
    if getattr(policy, "min_interval_s", 0.0):
        policy.min_interval_s = float(round_s)
    if getattr(policy, "period_s", None):
        policy.period_s = float(round_s)
    return policy


def _job(jr) -> dict:
    from gpuwise.runtime.script_jobs import describe

    js = jr.js
    return {"trains": describe(js.job), "status": js.status, "steps": jr.step, "progress": js.progress, "target": js.target,
            "rescales": jr.rescales, "restarts": jr.faults, "lost_steps": jr.lost_steps,
            "noise_scale": jr.model.phi, "first_loss": jr.losses[0][1] if jr.losses else None,
            "last_loss": jr.losses[-1][1] if jr.losses else None, "events": jr.events}


def _assumptions(run: RunResult, opts: RunOptions, policy, replayed) -> list[str]:
    return ([f"real PyTorch data-parallel training on Ray slot actors; chunks of {opts.chunk_steps} steps, each "
             "ending in a checkpoint (the checkpoint interval); learning rate scaled with sqrt(batch / M0)",
             "script and model jobs run the user's script (or the bundled transformers trainer) inside the slot "
             "actors; those using gpuwise.elastic stop at a boundary on the controller's command and restart at "
             "the new width from their checkpoint; per-slot batch limit 32 unless the row says",
             "restarts = group rebuilds after faults; rescales = rebuilds that changed a running job's "
             "width or batch; allocation_changes = the simulator's restarts/rescales count",
             "lost steps after a fault = steps of the chunk in flight, estimated from its elapsed time and "
             "the last measured step time (at most one checkpoint interval)",
             f"simulated JCT (the headline, jct_median_error): the same policy replayed in gpuwise.sim on the final "
             f"measured models, its policy seeing each job's model as the run's policy read it at the same time "
             f"(oracle_view_jct_s: seeing the final models from t=0, knowledge the run never had); each "
             f"job's first start costing its measured reservation -> training, every later allocation change "
             f"{replayed.restart_s:.2f} s (mean measured dead time of the run's rescales: last chunk boundary -> "
             f"training again); replay_allocations lists its allocations beside the run's events",
             "same_decisions_jct_s (jct_median_error_same_decisions): the run's own allocations and measured time "
             "outside chunks, each chunk at the final model's step time: the speed model's error alone, a "
             "consistency check (the model was fitted on these chunks)"]
            + [f"node {n['name']} ({n['gpus']} {n['gpu_type']}) was lost at {n['t']:.0f} s: its jobs were rebuilt "
               "elsewhere from their last checkpoint and nothing was placed on it again" for n in run.lost_nodes]
            + ([f"{run.preemptions_skipped} preemptions due by --preempt-every were skipped: no job was "
                "training with all its workers up at that moment"] if run.preemptions_skipped else [])
            + MeasuredPerf({}).assumptions(()) + policy.describe())


def _progress(live: bool, opts: RunOptions):
    """Live Rich table of jobs (status, width, batch, steps, progress) on a TTY."""
    if not live:
        return nullcontext()
    from rich.live import Live
    from rich.table import Table

    display = Live(Table(), refresh_per_second=2, transient=False)

    def tick(now: float, jobs: dict) -> None:
        t = Table(title=f"gpuwise run  t={now:.0f} s")
        for c in ("job", "status", "GPUs", "batch", "step", "progress"):
            t.add_column(c)
        for jr in jobs.values():
            a = jr.alloc
            t.add_row(jr.name, jr.js.status, str(a.num_gpus if a else 0), str(a.batch_size if a else "-"),
                      str(jr.step), f"{jr.js.fraction_done:.0%}")
        display.update(t)

    opts.on_tick = tick
    return display
