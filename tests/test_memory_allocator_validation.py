"""`validate memory --simulate-allocator`: the ms-swift Dec-2023 rows chosen and labelled, and the real trace +
allocator replay run on a one-layer model of the rows' structure (the 7B rows take minutes: not run here)."""

from dataclasses import replace

import pytest

from gpuwise.validation import memory_allocator as MA
from gpuwise.validation.memory_external import SWIFT_DEC_CSV, ms_swift_rows


def _tiny(name):
    from gpuwise.workload.models import load_model

    return replace(load_model(name), name="tiny-" + name, n_layers=1, hidden=128, n_heads=4, n_kv_heads=4,
                   ffn_hidden=256, vocab_size=512)


def test_cases_are_the_dec_2023_rows_compared_or_checked_once_each():
    cases = MA.cases()
    scored = [v for v in ms_swift_rows(SWIFT_DEC_CSV) if v.status in ("compared", "checked")]
    assert len(cases) == len(scored) >= 15
    assert [c.label for c in cases] == [v.source.partition(" ")[2] for v in scored]
    assert all(v.source.startswith(SWIFT_DEC_CSV + " ") for v in scored)
    assert len({c.label for c in cases}) == len(cases)          # the repeated 2048 baseline once
    assert {c.model for c in cases} == {"qwen-7b"}
    # > 2048 tokens vary (simulated lognormal too); <= 2048 fill max_length (fixed)
    assert {c.cfg.seq_len for c in cases if c.varying} == {4096, 8192}
    assert all(c.cfg.seq_len <= MA.FIXED_UP_TO for c in cases if not c.varying)
    # the OOM row must not fit, the one read at capacity must fit; the rest are compared
    checks = {(c.cfg.lora_rank, c.cfg.seq_len): c.check for c in cases if c.check}
    assert checks == {(0, 8192): "must not fit", (0, 4096): "must fit"}
    assert all(c.measured_gib is None for c in cases if c.check == "must not fit")
    assert [bool(c.caveat) for c in cases] == [c.cfg.quantize == "nf4" for c in cases]


def test_rows_above_2048_are_replayed_at_the_sources_lognormal_too():
    for c in MA.cases():
        dists = MA.lengths_for(c)
        assert dists[0].kind == "fixed" and dists[0].max_len == c.cfg.seq_len
        if c.cfg.seq_len <= 2048:
            assert len(dists) == 1
        else:
            (logn,) = dists[1:]
            assert (logn.kind, logn.max_len, logn.mean, logn.sd, logn.clip) == ("lognormal", c.cfg.seq_len, 3234,
                                                                                2548, True)


def test_a_real_tiny_run_scores_compared_rows_and_checks_against_a_capacity():
    """One-layer qwen structure at the 512-token full-FT row (trace + replay, a few seconds)."""
    case = next(c for c in MA.cases() if not c.check and c.cfg.seq_len == 512 and not c.cfg.lora_rank)
    (row,) = MA.simulate_cases([case], _tiny, steps=4, capacity=2 ** 40)
    assert row.lognormal is None and row.simulated is row.fixed and "512 tokens" in row.fixed.lengths
    # the simulated reserve adds the allocator's slack to the traced allocated peak
    assert row.fixed.reserved_gib >= row.traced_allocated_gib > 0 and row.fixed.fits
    # compared: an error against the measured 73.45 GiB (one layer of 128: far below), no check
    assert row.passed(row.fixed.fits) is None and row.error(row.fixed.reserved_gib) < -0.99
    summ = {s["rows"]: s for s in MA.summary([row])}
    assert summ["ms-swift Dec-2023 fixed-length rows (<= 2048)"]["simulated"]["rows"] == 1
    assert "ms-swift Dec-2023 varying-length rows" not in summ        # a group without rows is left out
    # the same configuration as an OOM check under a capacity below its traced peak: runs out, so it passes
    cap = int(row.traced_allocated_gib * 2 ** 30 / 2)
    from gpuwise.trace.reserved import record

    sim = MA._simulate(record(_tiny(case.model), case.cfg), int(row.traced_allocated_gib * 2 ** 30), cap, 4)
    small = replace(row, case=replace(case, check="must not fit", measured_gib=None), fixed=sim)
    assert not small.fixed.fits and small.passed(small.fixed.fits) is True and small.error(1.0) is None
    summ = {s["rows"]: s for s in MA.summary([small])}["ms-swift Dec-2023 fixed-length rows (<= 2048)"]
    assert (summ["checks"], summ["simulated_checks_passed"], summ["analytic_checks_passed"]) == (1, 1, 0)
    js = MA.to_json([row, small])
    assert js["rows"][0]["lognormal"] is None and js["rows"][1]["simulated_passed"] is True
    assert "not in the headline" in js["kind"] and js["rows"][0]["capacity_gib"] > 70


def test_validate_memory_help_names_both_targets(capsys):
    from gpuwise.cli.main import main

    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    assert "gpu and memory" in capsys.readouterr().out


def test_universal_llm_trainer_one_gpu_rows_once_each_with_their_checks():
    cases = MA.ult_cases()
    assert cases and all(c.source == MA.ULT_SOURCE and not c.varying and c.cfg.plan.gpus == 1 for c in cases)
    assert all(c.cfg.seq_len == 8192 and c.cfg.micro_batch == 2 for c in cases)
    compared = [c for c in cases if not c.check]
    # the H100 and A100 rows read the same: one case each (Qwen 3 8B has A100 rows only)
    assert len({(c.model, c.cfg.lora_rank, c.cfg.quantize) for c in compared}) == len(compared) == 15
    checks = sorted((c.gpu, c.model, c.check) for c in cases if c.check)
    assert checks == sorted([(g, m, "must fit") for g in ("A100-80GB-SXM", "H100-80GB-SXM")
                             for m in ("llama-3-8b", "llama-3.1-8b")]
                            + [(g, "gemma-2-9b", "must not fit") for g in ("A100-80GB-SXM", "H100-80GB-SXM")])
    # its GB readings, in GiB: Llama 3 8B LoRA read 36 GB
    lora = next(c for c in compared if c.model == "llama-3-8b" and c.cfg.lora_rank and not c.cfg.quantize)
    assert abs(lora.measured_gib - 36e9 / 2 ** 30) < 1e-9
