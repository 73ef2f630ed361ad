"""`gpuwise estimate --cp`: context parallelism by flags, as `gpuwise memory --cp`. The layout's cp
reaches the memory model (the sequence split over cp ranks) and the step-time model (the K/V ring,
roofline_step: exposed when attention is too short to hide it)."""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main

BASE = ["estimate", "--model", "gpt2", "--gpu", "RTX-4090", "--gpus", "4", "--batch-size", "1", "--seq-len", "1024",
        "--json"]


def _run(capsys, *extra):
    assert main([*BASE, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_cp_reaches_plan_memory_and_step_time(capsys):
    one, four = _run(capsys), _run(capsys, "--cp", "4")
    assert one["plan"] == {"dp": 4, "tp": 1, "pp": 1, "cp": 1, "zero": 0, "zero_shard": 0}
    assert four["plan"] == {"dp": 1, "tp": 1, "pp": 1, "cp": 4, "zero": 0, "zero_shard": 0}
    # a quarter of the sequence per GPU: fewer activations; the K/V ring over PCIe is not hidden by
    # gpt2's short attention at 256 tokens per rank, so it shows as communication time
    assert four["memory_gib"]["allocated"] < one["memory_gib"]["allocated"]
    assert four["comm_s"] > one["comm_s"]
    assert four["global_batch"] == one["global_batch"] // 4      # cp ranks share one sequence
    assert main(["memory", "gpt2", "--gpus", "4", "--cp", "4", "--seq-len", "1024", "--gpu", "RTX-4090",
                 "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["allocated_gib"] == pytest.approx(four["memory_gib"]["allocated"], abs=1e-3)   # one memory model


@pytest.mark.parametrize("extra,needle", [
    (["--cp", "3"], "tp*pp*cp"),                              # 4 GPUs do not split into cp=3 groups
    (["--cp", "0"], "--cp"),
    (["--cp", "4", "--seq-len", "1022"], "cp"),               # cp must divide the sequence
])
def test_bad_cp_is_one_line_exit_2(capsys, extra, needle):
    argv = list(BASE)
    if "--seq-len" in extra:
        i = argv.index("--seq-len")
        del argv[i:i + 2]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_cp_with_a_job_file_is_refused(capsys):
    assert main(["estimate", "examples/llama-3.1-8b-pretrain.yaml", "--gpu", "H100", "--gpus", "8", "--cp", "2"]) == 2
    assert "--cp" in capsys.readouterr().err
