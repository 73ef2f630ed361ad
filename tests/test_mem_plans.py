"""feasible_plans / fewest_gpus / fit_gpus: every plan is legal, fits and is ranked; the fewest
count is minimal (Frenzy MARP step 4, papers.md E.3: smallest feasible N per GPU type)."""

from __future__ import annotations

import pytest

from gpuwise.errors import InputError
from gpuwise.estimate.feasible_plans import feasible_plans, fewest_gpus, plan_cost
from gpuwise.estimate.memory import estimate_memory
from gpuwise.hardware.gpus import get_gpu
from gpuwise.plan.fit_gpus import fit_gpus
from gpuwise.workload.models import load_model
from gpuwise.workload.training import TrainingConfig

CFG = TrainingConfig(micro_batch=1, seq_len=4096)


def test_plans_are_legal_fit_and_ranked():
    gpu = get_gpu("H100")
    spec = load_model("llama-3.1-70b")
    plans = feasible_plans(spec, CFG, gpu, 32)
    assert len(plans) > 10
    costs = [plan_cost(c) for c, _ in plans]
    assert costs == sorted(costs)
    for c, est in plans:
        p = c.plan
        assert p.gpus == 32 and p.tp <= 8 and 8 % p.tp == 0
        assert spec.n_heads % p.tp == 0 and spec.n_kv_heads % p.tp == 0 and p.pp <= spec.n_layers
        assert c.grad_accum >= p.pp
        assert est.fits(gpu) and est.total == estimate_memory(spec, c).total
        assert c.micro_batch == 1 and c.seq_len == 4096
    labels = [(c.plan, c.recompute) for c, _ in plans]
    assert len(labels) == len(set(labels))


def test_no_plan_missed_against_brute_force():
    # small search space: brute force over every legal plan of gpt2-xl on 4 x T4 at batch 8
    from itertools import product

    from gpuwise.workload.training import ParallelPlan

    gpu, spec = get_gpu("T4"), load_model("gpt2-xl")
    cfg = TrainingConfig(micro_batch=8, seq_len=1024, flash_attention=False)
    got = {(c.plan, c.recompute) for c, _ in feasible_plans(spec, cfg, gpu, 4)}
    want = set()
    for tp, pp, cp, zero, rec, sp in product((1, 2, 4), (1, 2, 4), (1, 2, 4), range(4), ("none", "selective", "full"),
                                             (False, True)):
        if tp * pp * cp > 4 or 4 % (tp * pp * cp) or spec.n_heads % tp or (sp and tp == 1):
            continue
        dp = 4 // (tp * pp * cp)
        if dp == 1 and zero:
            continue
        c = TrainingConfig(micro_batch=8, seq_len=1024, flash_attention=False, recompute=rec,
                           grad_accum=max(1, pp), plan=ParallelPlan(dp=dp, tp=tp, pp=pp, cp=cp, sp=sp, zero=zero))
        if estimate_memory(spec, c).fits(gpu):
            want.add((c.plan, rec))
    assert got == want and want


def test_fewest_gpus_is_minimal():
    gpu = get_gpu("A100-80GB")
    n, plans = fewest_gpus("llama-3.1-70b", CFG, gpu)
    assert plans and all(c.plan.gpus == n for c, _ in plans)
    assert feasible_plans("llama-3.1-70b", CFG, gpu, n - 1) == []
    # Frenzy E.3 reading: the 1.5B model needs sharding on a 24 GB GPU but fits one 80 GB GPU
    assert fewest_gpus("gpt2-xl", TrainingConfig(micro_batch=1, seq_len=1024), get_gpu("A100-80GB"))[0] == 1
    assert fewest_gpus("gpt2-xl", TrainingConfig(micro_batch=1, seq_len=1024), get_gpu("L4"))[0] > 1


def test_nothing_fits_returns_none_and_memoised():
    assert fewest_gpus("llama-3.1-405b", CFG, get_gpu("T4"), max_gpus=8) is None
    a = feasible_plans("llama-3.1-8b", CFG, get_gpu("H100"), 8)
    b = feasible_plans("llama-3.1-8b", CFG, get_gpu("H100"), 8)
    assert a == b and a[0][1] is b[0][1]


def test_explicit_models_data_parallel_only():
    plans = feasible_plans("resnet50", TrainingConfig(micro_batch=64, seq_len=1), get_gpu("V100-32GB"), 4)
    assert plans and all(c.plan.tp == c.plan.pp == 1 and c.plan.dp == 4 for c, _ in plans)


def test_fit_gpus_ranked_by_count():
    res = fit_gpus("llama-3.1-70b", CFG, [get_gpu(n) for n in ("T4", "H100", "H200", "A100-40GB")], max_gpus=64)
    counted = [r.gpus for r in res if r.gpus is not None]
    assert counted == sorted(counted)
    assert res[-1].gpu.name == "T4" and res[-1].gpus is None and "does not fit" in res[-1].reason


def test_bad_counts():
    with pytest.raises(InputError):
        feasible_plans("gpt2", CFG, get_gpu("H100"), 0)
    with pytest.raises(InputError):
        fewest_gpus("gpt2", CFG, get_gpu("H100"), max_gpus=0)
