"""`gpuwise estimate`: the job comes either from JOB.yaml or from flags, never silently from both."""

import json
import subprocess
import sys

JOB = "examples/llama-3.1-8b-pretrain.yaml"


def run(*args):
    return subprocess.run([sys.executable, "-m", "gpuwise", "estimate", *args], capture_output=True, text=True)


def test_job_file_plus_job_flags_is_refused_not_ignored():
    for extra in (["--model", "gpt2"], ["--seq-len", "1024"], ["--zero", "0"]):
        r = run(JOB, "--gpu", "H100", "--gpus", "8", *extra)
        assert r.returncode == 2, r.stderr
        assert extra[0] in r.stderr and "JOB.yaml" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_flag_form_default_sequence_respects_the_position_table():
    # gpt2 has 1024 learned positions: the default must not be the generic 2048
    r = run("--model", "gpt2", "--gpu", "A100-40GB", "--gpus", "1", "--batch-size", "4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["seq_len"] == 1024
    # 4 sequences x 1024 tokens per step
    assert abs(out["tokens_per_second_per_gpu"] * out["step_time_s"] - 4 * 1024) < 1e-6 * 4096
