"""Measurements flow back (issue 22): the calibration's fit rules with numbers checked by hand, the goodput
object's calibrated answers (and the runtime's policies reading the same object), and `gpuwise validate
runs` on a small measurements file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpuwise.cli.main import main
from gpuwise.estimate.calibration import (MIN_STEPS, Observation, fit_calibration, measured_peaks, memory_factor,
                                         step_factor)
from gpuwise.policies.base import JobState
from gpuwise.runtime.measured import MeasuredPerf, OnlineFit
from gpuwise.runtime.measurements import job_goodput
from gpuwise.runtime.workload import RunJob

GPU = "T4"


def _obs(steps, measured, predicted, gpus=1, batch=8, peak=None, predicted_peak=None, gpu=GPU):
    return Observation(gpu, gpus, 1, batch, steps, measured, predicted, peak, predicted_peak)


def test_step_factor_is_the_median_over_measured_steps():
    # 3 steps at ratio 2 and 4 steps at ratio 3: the steps' ratios 2,2,2,3,3,3,3 -> median 3
    assert step_factor([_obs(3, 0.2, 0.1), _obs(4, 0.6, 0.2)]) == pytest.approx(3.0)
    # 4 + 4 steps at ratios 1 and 5: median of 1,1,1,1,5,5,5,5 = (1 + 5) / 2 = 3
    assert step_factor([_obs(4, 0.1, 0.1), _obs(4, 0.5, 0.1)]) == pytest.approx(3.0)
    # fewer than MIN_STEPS steps with a prediction: no factor yet (an unpredicted shape does not count)
    assert step_factor([_obs(MIN_STEPS - 1, 0.2, 0.1), _obs(10, 0.2, None)]) is None


def test_memory_factor_is_the_median_ratio_and_never_lowers():
    assert memory_factor({(1, 8): (12.0, 10.0), (2, 8): (9.0, 10.0)}) == pytest.approx(1.05)  # median(1.2, 0.9)
    assert memory_factor({(1, 8): (8.0, 10.0)}) == 1.0     # measured below the prediction: others not lowered
    assert memory_factor({}) == 1.0


def test_calibration_is_per_gpu_type_and_states_its_basis():
    cal = fit_calibration([_obs(5, 0.3, 0.1), _obs(9, 0.3, 0.1, gpus=2), _obs(2, 1.0, 0.1, gpu="A10G")])
    assert cal.factor(GPU) == pytest.approx(3.0) and cal.factor("A10G") == 1.0 and cal.factor("L4") == 1.0
    notes = " ".join(cal.notes())
    assert "T4 scaled by 3 (median measured/predicted) from 14 measured steps on 2 shapes" in notes
    assert f"A10G not calibrated yet: 2 of the {MIN_STEPS}" in notes


@pytest.fixture()
def good():
    return job_goodput(RunJob(name="lm", arrival_s=0, num_gpus=1, batch_size=8, application="tiny-llama", steps=200,
                              min_batch=8, max_batch=32))


def test_a_slower_measurement_slows_every_answer_by_the_fitted_factor(good):
    batches = (8, 16, 32)
    raw_table = np.array(good.table(GPU, 4, 4, batches))
    raw_best = good.best(GPU, 4, 2)
    raw = good.at_batch(GPU, 4, 2, 16)
    obs = good.observe(GPU, 4, 2, 1, 16, 10, 3 * raw.step_time_s)
    assert obs.predicted_step_s == pytest.approx(raw.step_time_s)        # recorded against the uncalibrated model
    assert good.at_batch(GPU, 4, 2, 16).step_time_s == pytest.approx(3 * raw.step_time_s)
    assert good.predicted_at_batch(GPU, 4, 2, 16).step_time_s == pytest.approx(raw.step_time_s)
    assert np.allclose(good.table(GPU, 4, 4, batches), raw_table / 3)      # the policies' table: 3x slower
    assert good.best(GPU, 4, 2).train_hours == pytest.approx(3 * raw_best.train_hours)
    assert good.best(GPU, 4, 2).plan == raw_best.plan                      # same layout on the type
    assert any("step time on T4 scaled by 3 " in a and "10 measured steps on 1 shape" in a for a in good.assumptions())
    # a second shape measured 5x slower: the median over the 10 + 10 steps' ratios is (3 + 5) / 2 = 4
    good.observe(GPU, 4, 1, 1, 8, 10, 5 * good.predicted_at_batch(GPU, 4, 1, 8).step_time_s)
    assert good.at_batch(GPU, 4, 2, 16).step_time_s == pytest.approx(4 * raw.step_time_s)
    assert any("20 measured steps on 2 shapes" in a for a in good.assumptions())


def test_measured_peak_replaces_the_prediction_there_and_raises_it_elsewhere(good):
    at = good.at_batch(GPU, 4, 2, 16)
    other = good.at_batch(GPU, 4, 1, 16)
    good.observe(GPU, 4, 2, 1, 16, 10, at.step_time_s, peak_gib=2 * at.memory_reserved_gib)
    cal = good.at_batch(GPU, 4, 2, 16)
    assert cal.memory_reserved_gib == pytest.approx(2 * at.memory_reserved_gib)
    assert cal.memory_gib == pytest.approx(at.memory_gib + at.memory_reserved_gib)   # the total moves by the same bytes
    assert good.at_batch(GPU, 4, 1, 16).memory_reserved_gib == pytest.approx(2 * other.memory_reserved_gib)
    assert cal.step_time_s == pytest.approx(at.step_time_s)       # measured = predicted: factor 1


def test_the_runtimes_policies_read_the_same_calibrated_object(good):
    job = RunJob(name="lm", arrival_s=0, num_gpus=1, batch_size=8, application="tiny-llama", steps=200,
                 min_batch=8, max_batch=32)
    fit = OnlineFit(ref_batch=8)
    perf = MeasuredPerf({"lm": fit}, goodputs={"lm": good})
    js = JobState(job=job, submitted_s=0.0, target=200.0, last_update=0.0)
    batches = (8, 16, 32)
    prior = perf.goodput_grid(js, GPU, 3, 3, batches)            # nothing measured: the Pollux prior
    fit.points = [(1, 2, 8.0, 0.05, 0.01)]
    good.observe(GPU, 3, 2, 1, 16, 10, 0.05)
    grid = perf.goodput_grid(js, GPU, 3, 3, batches)
    assert not np.allclose(grid, prior)
    assert np.allclose(grid, good.table(GPU, 3, 3, batches))     # local batches 2..64 all allowed here
    opt = good.at_batch(GPU, 3, 2, 16)
    assert grid[1, 1] == pytest.approx(1 / (opt.train_hours * 3600))
    assert opt.step_time_s == pytest.approx(0.05)                # the measured shape answers its measurement
    fit.points.append((1, 3, 8.0, 0.07, 0.01))                    # two configurations: the Pollux fit takes over
    assert perf.calibrated(job, GPU) is None


def test_a_calibrated_spec_model_is_what_the_simulators_policies_read():
    """JobModelPerf (the simulator's and the sim service's policies) reads the goodput object it holds:
    calibrating that object changes the policies' table and the placement's option alike."""
    from gpuwise.policies.job_model_perf import JobModelPerf
    from gpuwise.runtime.measurements import runtime_spec
    from gpuwise.workload.traces import TraceJob

    run = RunJob(name="lm", arrival_s=0, num_gpus=1, batch_size=8, application="tiny-llama", steps=200,
                 min_batch=8, max_batch=32)
    perf = JobModelPerf(specs={"lm": runtime_spec(run)}, gpus_per_node={GPU: 3})
    job = TraceJob(name="lm", arrival_s=0.0, num_gpus=1, jobspec="lm")
    js = JobState(job=job, submitted_s=0.0, target=1.0, last_update=0.0)
    batches = (8, 16, 32)
    before = np.array(perf.goodput_grid(js, GPU, 3, 3, batches))
    good = perf.spec_model("lm")
    good.observe(GPU, 3, 2, 1, 16, 10, 2 * good.predicted_at_batch(GPU, 3, 2, 16).step_time_s)
    after = perf.goodput_grid(js, GPU, 3, 3, batches)
    assert np.allclose(after, before / 2) and np.allclose(after, good.table(GPU, 3, 3, batches))
    assert perf.spec_option(job, GPU, 2, 1, 16, 3) == good.at_batch(GPU, 2, 2, 16, nodes=1)   # its node size: 2
    assert any("scaled by 2 " in a for a in perf.spec_assumptions())


def _write(path, rows, header="job,model,entrypoint,gpu_type,device,gpus,nodes,batch,steps,predicted_step_s,"
                              "measured_step_s,predicted_peak_gib,measured_peak_gib,commit,time_utc"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


FIXTURE = [
    "a,tiny-llama,,T4,cpu,1,1,8,5,0.001,0.1,0.004,,abc,2026-01-01T00:00:00Z",
    "a,tiny-llama,,T4,cpu,1,1,8,5,0.001,0.2,0.004,,abc,2026-01-01T00:00:01Z",
    "b,tiny-llama,,H100-80GB-SXM,NVIDIA H100 80GB HBM3,1,1,8,5,0.010,0.008,2.0,2.5,abc,2026-01-01T00:00:02Z",
]


def test_validate_runs_renders_rows_and_honest_groups(tmp_path, capsys):
    f = _write(tmp_path / "measurements.csv", FIXTURE)
    assert main(["validate", "runs", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    groups = {g["group"]: g for g in out["groups"]}
    cpu = next(g for k, g in groups.items() if k.startswith("step time, CPU rows: CPU workers vs the GPU roofline"))
    assert cpu["rows"] == 2 and cpu["median_abs_error"] == pytest.approx((0.99 + 0.995) / 2)
    # row 2 calibrated on row 1 alone (5 steps, ratio 100): predicts 0.1 s, measured 0.2 s -> 50 %
    assert out["rows"][1]["calibrated_step_s"] == pytest.approx(0.1)
    assert groups["step time, CPU rows (calibrated on earlier rows)"]["max_abs_error"] == pytest.approx(0.5)
    assert groups["step time, CUDA rows (uncalibrated model)"]["median_abs_error"] == pytest.approx(0.25)
    assert groups["peak reserved memory, CUDA rows"]["median_abs_error"] == pytest.approx(0.2)
    assert out["rows"][0]["measured_peak_gib"] is None and len(out["assumptions"]) == 3
    assert main(["validate", "runs", str(tmp_path)]) == 0            # a run's state folder works too
    text = capsys.readouterr().out
    assert "not modelled; not an accuracy" in text and "peak reserved memory, CUDA rows" in text


@pytest.mark.parametrize("rows,header,needle", [
    (FIXTURE[:1], "job,gpu_type,device", "missing column gpus"),
    (["a,tiny-llama,,T4,cpu,1,1,8,5,0.001,fast,0.004,,abc,t"], None, "measured_step_s"),
    ([], None, "no measured rows"),
])
def test_validate_runs_rejects_a_bad_file_with_exit_2(tmp_path, capsys, rows, header, needle):
    f = _write(tmp_path / "m.csv", rows, **({"header": header} if header else {}))
    assert main(["validate", "runs", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert main(["validate", "runs", str(tmp_path / "nope.csv")]) == 2
    assert "give a measurements.csv" in capsys.readouterr().err


def test_the_runtime_log_writes_rows_that_validate_and_resume_the_calibration(tmp_path, capsys):
    from gpuwise.runtime.measurements import COLUMNS, MeasurementLog

    job = RunJob(name="lm", arrival_s=0, num_gpus=1, batch_size=8, application="tiny-llama", steps=200,
                 min_batch=8, max_batch=32)
    log = MeasurementLog(tmp_path / "measurements.csv")
    first = job_goodput(job)
    pred = first.predicted_at_batch(GPU, 3, 3, 9).step_time_s
    log.record(job, GPU, "cpu", 3, 1, 8, 5, 50 * pred, None, first, 3)   # batch 8 on 3: predicted at 3 x 3
    log.record(job, GPU, "cpu", 3, 1, 8, 5, 70 * pred, None, first, 3)
    assert first.calibration.factor(GPU) == pytest.approx(60.0)            # median of 5 x 50 and 5 x 70
    again = job_goodput(job)
    assert log.replay("lm", again) == 2 and again.calibration.factor(GPU) == pytest.approx(60.0)
    assert main(["validate", "runs", str(log.path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["predicted_step_s"] for r in rows] == pytest.approx([pred, pred], rel=1e-5)
    assert rows[1]["calibrated_step_s"] == pytest.approx(50 * pred, rel=1e-5)   # from row 1 only
    assert log.path.read_text().splitlines()[0] == ",".join(COLUMNS)


def test_a_long_job_keeps_its_newest_chunks_and_follows_them(good, monkeypatch):
    """A goodput object keeps at most MAX_OBSERVATIONS chunks (a job of millions of steps refits in
    bounded time); the factor is then the newest chunks' (here: 3x after older 2x chunks scroll out)."""
    import gpuwise.estimate.goodput as goodput_module

    monkeypatch.setattr(goodput_module, "MAX_OBSERVATIONS", 4)
    raw = good.predicted_at_batch(GPU, 4, 2, 16).step_time_s
    for factor in (2, 2, 2, 2, 3, 3, 3, 3):
        good.observe(GPU, 4, 2, 1, 16, 10, factor * raw)
        assert len(good.observations) <= 4
    assert good.at_batch(GPU, 4, 2, 16).step_time_s == pytest.approx(3 * raw)


def test_a_nan_inf_or_zero_reading_never_enters_the_calibration():
    """Only finite readings above zero count: a NaN prediction does not make every answer NaN, and a
    NaN or zero peak does not zero a shape's memory."""
    assert step_factor([_obs(10, 2.0, float("nan")), _obs(10, float("inf"), 1.0), _obs(10, 3.0, 1.0)]) == 3.0
    assert measured_peaks([_obs(10, 1.0, 1.0, peak=float("nan"), predicted_peak=4.0),
                           _obs(10, 1.0, 1.0, batch=16, peak=0.0, predicted_peak=4.0)]) == {}
