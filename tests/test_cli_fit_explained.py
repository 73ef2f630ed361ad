"""`estimate` and `memory` print every number behind their "fits" verdict (review finding): required
(allocated + CUDA context + NCCL) against usable (device memory less the 5% headroom), next to what the
caching allocator reserves, so a reserved total above the card's memory with "fits" is explained."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main

# llama-7b, 8 x A100-80GB, ZeRO-3, micro-batch 3 x 4096, selective recompute: reserved ~98 GiB, yet it fits
FITS_BUT_RESERVED_ABOVE_CARD = ["estimate", "--model", "llama-7b", "--gpu", "A100-80GB", "--gpus", "8",
                                "--batch-size", "3", "--seq-len", "4096", "--zero", "3", "--recompute", "selective"]
KEYS = {"allocated", "reserved", "device_total", "required", "device", "headroom", "usable", "spare"}


def _json(capsys, argv, code=0):
    capsys.readouterr()
    assert main(argv + ["--json"]) == code
    return json.loads(capsys.readouterr().out)


def _consistent(m: dict, fits: bool) -> None:
    assert set(m) == KEYS
    assert m["allocated"] < m["required"] and m["allocated"] <= m["reserved"] < m["device_total"]
    assert m["headroom"] == pytest.approx(0.05 * m["device"], abs=1e-3)
    assert m["usable"] == pytest.approx(m["device"] - m["headroom"], abs=1e-3)
    assert m["spare"] == pytest.approx(m["usable"] - m["required"], abs=1e-3)
    assert fits == (m["required"] <= m["usable"])


def test_estimate_json_explains_fits_when_reserved_exceeds_the_card(capsys):
    out = _json(capsys, FITS_BUT_RESERVED_ABOVE_CARD)
    m = out["memory_gib"]
    _consistent(m, out["fits"])
    assert out["fits"] and m["reserved"] > m["device"]        # the case the reviewer found unexplained
    assert "memory_per_gpu_gib" not in out                      # replaced by the named parts


def test_estimate_human_prints_required_usable_and_reserved(capsys):
    m = _json(capsys, FITS_BUT_RESERVED_ABOVE_CARD)["memory_gib"]
    assert main(FITS_BUT_RESERVED_ABOVE_CARD) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"required {m['required']:.1f} GiB <= usable {m['usable']:.1f} GiB (fits)" in text
    assert f"allocated {m['allocated']:.1f} GiB" in text and f"{m['reserved']:.1f} GiB by the caching allocator" in text
    assert f"headroom {m['headroom']:.1f} GiB" in text


def test_estimate_does_not_fit_message_uses_the_compared_numbers(capsys):
    argv = FITS_BUT_RESERVED_ABOVE_CARD[:8] + ["4"] + FITS_BUT_RESERVED_ABOVE_CARD[9:]
    out = _json(capsys, argv, code=1)
    m = out["memory_gib"]
    _consistent(m, out["fits"])
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"required {m['required']:.1f} GiB per GPU > usable {m['usable']:.1f} GiB" in err  # not the reserved total


def test_memory_json_and_table_show_the_fit_numbers(capsys):
    argv = ["memory", "llama-3.1-8b", "--gpus", "8", "--zero", "3", "--recompute", "full", "--gpu", "H100", "T4"]
    out = _json(capsys, argv)
    for gpu, f in out["fit_gib"].items():
        assert set(f) == {"device", "headroom", "usable", "spare"}
        _consistent({**f, "allocated": out["allocated_gib"], "reserved": out["reserved_gib"],
                     "device_total": out["per_gpu_gib"], "required": out["required_gib"]}, out["fits"][gpu])
    assert out["fits"] == {"H100-80GB-SXM": True, "T4": False}
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "required GiB" in text and "usable GiB" in text and "headroom GiB" in text
    assert f"{out['required_gib']:.2f}" in text and f"{out['fit_gib']['T4']['usable']:.2f}" in text
