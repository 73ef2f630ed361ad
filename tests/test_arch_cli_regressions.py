"""Human-output paths the review found crashing (JSON worked, the table path did not).

Issue 4 "Done means": an infeasible job gets a clear answer saying which constraint binds and the
nearest feasible option; the human form must print it, whatever type the nearest value has.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpuwise.cli.main import main

JOB = str(Path(__file__).resolve().parent.parent / "examples" / "llama-3.1-8b-pretrain.yaml")


def test_plan_too_big_for_memory_prints_nearest_gpu_count(capsys):
    # Llama-3.1-8B pre-training cannot fit on one T4: the nearest option is a GPU count, a list
    assert main(["plan", JOB, "--gpu", "T4", "--max-gpus", "1"]) == 1   # no feasible answer (issue 14)
    out = capsys.readouterr().out
    assert "No configuration meets the constraints (memory)." in out
    assert re.search(r"nearest feasible: min_gpus = \d+ x T4", out), out


def test_plan_deadline_and_budget_print_numbers(tmp_path, capsys):
    job = tmp_path / "tight.yaml"
    job.write_text("name: tight\nmodel: llama-3.1-8b\ntraining:\n  tokens: 1e12\n  global_batch: 512\n"
                   "deadline_hours: 1\nbudget_usd: 10\nconstraints:\n  gpus: [H100]\n  max_gpus: 64\n")
    assert main(["plan", str(job)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"nearest feasible: min_deadline_hours = [\d,.]+", out), out
    assert re.search(r"nearest feasible: min_budget_usd = [\d,.]+", out), out
