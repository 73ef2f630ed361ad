"""`gpuwise validate memory --against trace`: grid rows become configurations, the allocated peak
is compared, and errors are summarised by family and feature."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.estimate.memory import estimate_memory
from gpuwise.validation.memory_trace import row_config, validate_against_trace

HEADER = ("model,family,params,gpus,dp,tp,pp,cp,zero,sp,pp_schedule,micro_batch,seq_len,grad_accum,precision,"
          "optimizer,recompute,lora_rank,quantize,flash,param_bytes,grad_bytes,optimizer_bytes,activation_bytes,"
          "temporary_bytes,other_bytes,peak_allocated_bytes,method,trace_s")


def _grid(tmp_path, rows):
    p = tmp_path / "grid.csv"
    p.write_text("# regenerate: python -m gpuwise.trace.grid\n" + HEADER + "\n" + "\n".join(rows) + "\n")
    return p


def test_rows_map_to_configs_and_errors(tmp_path):
    row = "gpt2,gpt2,124439808,2,1,2,1,1,3,True,1f1b,2,256,1,bf16-mixed,adamw,layer-2,0,,True,,,,,,,{peak},full,1"
    cfg = row_config(dict(zip(HEADER.split(","), row.format(peak=1).split(","))))
    assert cfg.plan.tp == 2 and cfg.plan.sp and cfg.plan.zero == 3 and cfg.recompute == "layer-2"
    alloc = estimate_memory("gpt2", cfg, context=False).allocated
    bad = "nosuch,llama,1,1,1,1,1,1,0,False,1f1b,1,128,1,bf16-mixed,adamw,none,0,,True,,,,,,,1000,full,0"
    rep = validate_against_trace(_grid(tmp_path, [row.format(peak=alloc / 1.1), row.format(peak=alloc), bad]))
    errs = [r.error for r in rep.rows]
    assert errs[0] == pytest.approx(0.1) and errs[1] == pytest.approx(0.0) and errs[2] is None
    assert "not modelled" in rep.rows[2].reason
    n, med, mx = rep.summary()
    assert n == 2 and med == pytest.approx(0.05) and mx == pytest.approx(0.1)
    assert set(rep.groups("feature")) >= {"tp", "sp", "zero3", "recompute:layer"}
    assert rep.groups("family")["gpt2"][0] == 2


def test_cli_json_and_missing_grid(tmp_path, capsys):
    row = "gpt2,gpt2,124439808,1,1,1,1,1,0,False,1f1b,1,128,1,fp32,adamw,none,0,,True,,,,,,,2e9,full,1"
    assert main(["validate", "memory", "--against", "trace", "--grid", str(_grid(tmp_path, [row])), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["compared"] == 1 and out["rows"][0]["measured_bytes"] == 2e9 and "assumptions" in out
    assert main(["validate", "memory", "--against", "trace", "--grid", str(tmp_path / "none.csv")]) == 2
    assert "--grid" in capsys.readouterr().err
