"""One layout enumeration (gpuwise/estimate/layouts.py) behind both questions asked of a job.

Behaviour, not names: `gpuwise fit-gpus` (plan.fit_gpus), `estimate`'s nearest feasible option and the
job's goodput object (`JobGoodput.fewest_fitting`) give the same fewest GPU count and plan for the same
job, equal to what gpuwise answered before the two enumerations were merged (tests/data/
fewest_gpus_before.json, frozen from commit 1291629: a consistency check of the code against its earlier
self, not a measurement). The goodput search (`JobGoodput.best`, cp = 1) agrees with the memory
question: wherever a cp = 1 plan fits on the fewest count it finds a plan there, and nothing one below.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main
from gpuwise.estimate.goodput import JobGoodput
from gpuwise.estimate.layout_search import allowed_plans
from gpuwise.hardware.gpus import get_gpu
from gpuwise.plan.fit_gpus import fit_gpus
from gpuwise.workload.training import TrainingConfig

FROZEN = json.loads((Path(__file__).parent / "data" / "fewest_gpus_before.json").read_text())
ROWS = FROZEN["fewest"]


def _cfg(row) -> TrainingConfig:
    return TrainingConfig(micro_batch=row["micro"], seq_len=row["seq_len"], flash_attention=row["flash"])


def _id(row) -> str:
    return f"{row['model']}-{row['seq_len']}-mb{row['micro']}-{'flash' if row['flash'] else 'eager'}-{row['gpu']}"


@pytest.mark.parametrize("row", ROWS, ids=_id)
def test_fit_gpus_equals_goodput_object_and_the_old_answer(row):
    gpu = get_gpu(row["gpu"])
    good = JobGoodput.for_config(row["model"], _cfg(row))
    found = good.fewest_fitting(gpu, 8, row["max_gpus"])
    fit = fit_gpus(row["model"], _cfg(row), [gpu], max_gpus=row["max_gpus"])[0]
    if row["gpus"] is None:
        assert found is None and fit.gpus is None and "does not fit" in fit.reason
        return
    n, plans = found
    assert fit.gpus == n == row["gpus"]
    assert (fit.config, fit.memory) == plans[0] and fit.alternatives == len(plans) - 1
    assert [plans[0][0].plan.label(), plans[0][0].recompute] == row["top"] and len(plans) == row["plans"]
    # minimal: nothing fits one GPU fewer, and every plan listed fits on exactly n
    assert n == 1 or good.fitting_plans(gpu, n - 1) == []
    assert all(c.plan.gpus == n and m.fits(gpu) for c, m in plans)


@pytest.mark.parametrize("row", FROZEN["estimate_nearest"], ids=lambda r: f"{r['model']}-{r['gpu']}-{r['seq_len']}")
def test_estimate_nearest_feasible_equals_goodput_object(row, capsys):
    code = main(["estimate", "--model", row["model"], "--gpu", row["gpu"], "--gpus", "1", "--batch-size",
                 str(row["micro"]), "--seq-len", str(row["seq_len"]), "--json"])
    nearest = json.loads(capsys.readouterr().out)["infeasible"]["nearest"]
    assert code == 1 and nearest == row["nearest"]
    cfg = TrainingConfig(micro_batch=row["micro"], seq_len=row["seq_len"])
    n, plans = JobGoodput.for_config(row["model"], cfg).fewest_fitting(get_gpu(row["gpu"]))
    assert (n, plans[0][0].plan.label(), plans[0][0].recompute) == \
        (nearest["gpus"], nearest["plan"], nearest["recompute"])


SMALL = [r for r in ROWS if r["gpus"] is not None and r["gpus"] <= 16]


@pytest.mark.parametrize("row", SMALL, ids=_id)
def test_goodput_search_agrees_with_the_memory_question(row):
    """Where a cp = 1 plan fits on the fewest count, the goodput search (cp = 1) finds one there, and its
    plan is one the memory question lists with the same memory; one GPU fewer it finds none."""
    gpu = get_gpu(row["gpu"])
    good = JobGoodput.for_config(row["model"], _cfg(row))
    n, plans = good.fewest_fitting(gpu, 8, row["max_gpus"])
    listed = {(c.plan, c.recompute): m.total for c, m in plans}
    if not any(c.plan.cp == 1 for c, _ in plans):
        return           # only context parallelism fits: the goodput search (cp 1) needs more GPUs
    best = good.best(gpu.name, 8, n)
    assert best is not None
    mine = allowed_plans(good.space, _cfg(row), gpu, n, 8)
    assert mine and all(listed[(c.plan, c.recompute)] == pytest.approx(m.total) for c, m in mine)
    if n > 1:
        assert good.best(gpu.name, 8, n - 1) is None


@pytest.mark.parametrize("flash", [True, False])
def test_lightest_variant_per_layout_matches(flash):
    """For every (tp, pp, ZeRO) layout, the goodput search keeps the lightest recompute variant the memory
    question finds: with eager attention that is Megatron's selective recompute where it fits (the goodput
    search used to jump from none to full: the drift this enumeration removed)."""
    order = {"none": 0, "selective": 1, "op": 1, "full": 2}
    gpu, cfg = get_gpu("H100"), TrainingConfig(micro_batch=1, seq_len=4096, flash_attention=flash)
    good = JobGoodput.for_config("llama-3.1-8b", cfg)
    lightest: dict = {}
    for c, _ in good.fitting_plans(gpu, 8):
        if c.plan.cp == 1:
            k = (c.plan.tp, c.plan.pp, c.plan.zero)
            lightest[k] = min(lightest.get(k, 9), order[c.recompute])
    mine = {(c.plan.tp, c.plan.pp, c.plan.zero): order[c.recompute] for c, _ in allowed_plans(good.space, cfg, gpu, 8, 8)}
    assert mine == lightest
    assert flash or 1 in mine.values()
