"""`gpuwise gpus` CLI: JSON structure and human output (golden fields from gpuwise/data/gpus.csv)."""

import json
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "gpuwise", *args], capture_output=True, text=True)


def test_gpus_json():
    r = run("gpus", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    by_name = {g["name"]: g for g in data["gpus"]}
    assert by_name["H100-80GB-SXM"]["bf16_tflops"] == 989.4  # NVIDIA H100 datasheet, 1979 sparse / 2
    assert "H100" in by_name["H100-80GB-SXM"]["aliases"]
    assert all(g["source"] for g in data["gpus"])
    assert data["assumptions"]


def test_gpus_human_lists_sources():
    r = run("gpus", "-v")
    assert r.returncode == 0, r.stderr
    assert "A100-80GB-SXM" in r.stdout and "datasheet" in r.stdout and "Assumptions" in r.stdout
