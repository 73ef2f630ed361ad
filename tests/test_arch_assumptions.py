"""Every command that prints an estimate states its assumptions, in --json and for people.

DEVELOPERS.md: "Every estimate states its assumptions (efficiency factors, prices' date, what was
fitted from how many points) in human output and in --json (key `assumptions`, a list of strings)".
Each command runs in-process three times (JSON, the human form with --verbose, then without): with
--verbose the human form prints an "Assumptions:" block holding every assumption of the JSON form,
verbatim; without it, the answer and one line saying how many assumptions --verbose would print.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwise.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
JOB = str(ROOT / "examples/llama-3.1-8b-pretrain.yaml")
LORA = str(ROOT / "examples/llama-3.1-8b-lora.yaml")
RENT = str(ROOT / "examples/rent/fig1.yaml")
WORKLOAD = str(ROOT / "examples/workloads/small.csv")
PLACEMENTS = ROOT / "gpuwise/data/pollux/traces/bert/placements.csv"

COMMANDS = {
    "memory": ["memory", "llama-3.1-8b", "--gpus", "8", "--zero", "3"],
    "fit-gpus": ["fit-gpus", "llama-3.1-8b", "--gpu", "H100", "A100-40GB"],
    "estimate-spec": ["estimate", JOB, "--gpu", "H100", "--gpus", "8"],
    "estimate-flags-spot": ["estimate", "--model", "llama-3.1-8b", "--gpu", "A100-80GB", "--gpus", "16",
                            "--batch-size", "2", "--zero", "3", "--tokens", "1e9", "--spot"],
    "fit": ["fit", "{train}", "--predict", "{train}"],
    "plan": ["plan", LORA],
    "deepvm": ["deepvm", "--budget", "3"],
    "rent": ["rent", RENT, "--budget", "2", "--integer"],
    "simulate": ["simulate", "--workload", WORKLOAD, "--policy", "fifo"],
    "compare": ["compare", "--workload", WORKLOAD, "--policy", "fifo", "--policy", "las"],
}

# what DEVELOPERS.md asks the list to say, where it applies: efficiency factors, prices' date,
# what was fitted from how many points
MUST_MENTION = {
    "estimate-spec": ["efficiency", "catalog 20"],
    "estimate-flags-spot": ["efficiency", "preemption"],
    "fit": ["12 rows"],
    "plan": ["catalog dated 20", "compute efficiency"],
    "memory": ["overhead"],
}


@pytest.fixture(scope="module")
def train_csv(tmp_path_factory) -> str:
    """Twelve measured rows of the bundled Pollux BERT profile (the fit needs only a few)."""
    lines = PLACEMENTS.read_text().splitlines()
    path = tmp_path_factory.mktemp("fit") / "train.csv"
    path.write_text("\n".join([lines[0]] + lines[1::45][:12]) + "\n")
    return str(path)


def _run(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_assumptions_in_json_and_human_output(name, capsys, train_csv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything a command writes stays out of the checkout
    argv = [a.format(train=train_csv) for a in COMMANDS[name]]
    data = json.loads(_run(capsys, argv + ["--json"]))
    assumptions = data["assumptions"]
    assert isinstance(assumptions, list) and assumptions, f"{name}: empty or missing `assumptions`"
    assert all(isinstance(a, str) and a.strip() for a in assumptions)
    for piece in MUST_MENTION.get(name, []):
        assert any(piece in a for a in assumptions), f"{name}: no assumption mentions {piece!r}"

    short = _run(capsys, argv)
    assert "Assumptions:" not in short and f"{len(assumptions)} assumption" in short, name
    assert not any(f"- {a}" in short for a in assumptions), f"{name}: assumptions printed without --verbose"
    assert short.rstrip().splitlines()[-1].startswith(f"({len(assumptions)} assumption") or "wrote" in short

    human = _run(capsys, argv + ["--verbose"])
    assert "Assumptions:" in human, f"{name}: human output prints no assumptions"
    block = human.rsplit("Assumptions:", 1)[1]
    printed = {line.strip()[2:] for line in block.splitlines() if line.strip().startswith("- ")}
    assert printed, f"{name}: empty Assumptions block"
    missing = [a for a in assumptions if a not in printed]
    assert not missing, f"{name}: in --json but not printed: {missing}"
