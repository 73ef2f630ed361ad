"""The external HF + PEFT sources (Vertex OpenLLaMA-7B, Unsloth README) as validation rows."""

from gpuwise.validation.memory import validate_memory
from gpuwise.validation.memory_external import _fits_vram, max_context


def test_max_context_is_the_fit_boundary():
    c24, c80 = max_context("llama-3.1-8b", 24.0), max_context("llama-3.1-8b", 80.0)
    assert 0 < c24 < c80
    assert _fits_vram("llama-3.1-8b", c24, 24.0) and not _fits_vram("llama-3.1-8b", c24 + 16, 24.0)


def test_vertex_rows_compare_device_totals_and_check_fits():
    rows = [r for r in validate_memory().rows if r.source.startswith("vertex_")]
    assert len(rows) == 18
    compared = [r for r in rows if r.status == "compared"]
    assert len(compared) == 7 and all(r.unit == "GiB" and "per_gpu_gib" in r.note for r in compared)
    # LoRA at 512 tokens needs more than at 256 (the report: 28.2 vs 20.5 GB), and so does the estimate
    by_id = {r.source.split()[1]: r for r in rows}
    assert by_id["#4"].predicted > by_id["#3"].predicted and by_id["#4"].measured > by_id["#3"].measured
    # the V100 LoRA OOM and the A100 batch-32 QLoRA fit are checked with the estimate's own fit rule
    assert by_id["#18"].status == by_id["#15"].status == "checked"
    assert by_id["#18"].passed and by_id["#15"].passed
