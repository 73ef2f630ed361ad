"""Impossible plans and bad settings raise one InputError naming the field (CLI: exit 2)."""

from __future__ import annotations

import pytest

from gpuwise.errors import InputError
from gpuwise.estimate.memory import estimate_memory
from gpuwise.workload.training import ParallelPlan, TrainingConfig


@pytest.mark.parametrize("model,cfg,field", [
    ("llama-3.1-8b", TrainingConfig(plan=ParallelPlan(tp=3)), "tp"),
    ("llama-3.1-8b", TrainingConfig(plan=ParallelPlan(tp=16)), "tp"),          # 8 kv heads
    ("llama-3.1-8b", TrainingConfig(plan=ParallelPlan(pp=33)), "pp"),
    ("llama-3.1-8b", TrainingConfig(micro_batch=0), "batch-size"),
    ("llama-3.1-8b", TrainingConfig(micro_batch=-2), "batch-size"),
    ("llama-3.1-8b", TrainingConfig(seq_len=0), "seq-len"),
    ("llama-3.1-8b", TrainingConfig(precision="fp4"), "precision"),
    ("llama-3.1-8b", TrainingConfig(optimizer="lion"), "optimizer"),
    ("llama-3.1-8b", TrainingConfig(recompute="some"), "recompute"),
    ("llama-3.1-8b", TrainingConfig(plan=ParallelPlan(zero=4)), "zero"),
    ("llama-3.1-8b", TrainingConfig(quantize="nf4"), "quantize"),
    ("llama-3.1-8b", TrainingConfig(seq_len=1000, plan=ParallelPlan(cp=3)), "cp"),
    ("gpt2", TrainingConfig(seq_len=2048), "seq-len"),
    ("resnet50", TrainingConfig(plan=ParallelPlan(tp=2)), "tp/pp/cp"),
])
def test_bad_settings(model, cfg, field):
    with pytest.raises(InputError) as e:
        estimate_memory(model, cfg)
    assert e.value.field == field
    assert "\n" not in str(e.value)


def test_fits_and_gib():
    from gpuwise.hardware.gpus import get_gpu

    est = estimate_memory("llama-3.1-8b", TrainingConfig(micro_batch=1, seq_len=2048))
    assert est.per_gpu_gib == pytest.approx(est.total / 2 ** 30)
    assert sum(est.breakdown_gib().values()) == pytest.approx(est.per_gpu_gib)
    assert not est.fits(get_gpu("A100-80GB"))          # 16 B/param x 8B params alone is 120 GiB
    small = estimate_memory("llama-3.1-8b", TrainingConfig(micro_batch=1, seq_len=2048, lora_rank=16, quantize="nf4",
                                                                    recompute="full"))
    assert small.fits(get_gpu("L4")) and small.per_gpu_gib < 12   # 5.3 GiB NF4 + 16-bit embeddings/head
    assert any("NF4" in a for a in small.assumptions)
