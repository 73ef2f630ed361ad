"""Helpers the review folded duplicated logic into: user-file reading, output-path checks, the rent
budget's weights/refusal and the Lagrange-multiplier bracketing shared by both rent solvers.

The bisection reference is the closed form of papers.md A.4 (Li et al., arXiv:2406.15560): at
b = 2 GPUs the two-type example has mu* = 1/9 (reproduced to 1e-6, as the issue asks).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwise.cli.output import check_output_file
from gpuwise.errors import InputError
from gpuwise.plan.rent.jobtypes import JobType, SizeDistribution
from gpuwise.plan.rent.solver import Budget, bracket_mu, solve
from gpuwise.plan.rent.spec import load_spec, parse_budget
from gpuwise.plan.rent.speedup import PowerSpeedup
from gpuwise.user_files import load_yaml, read_text

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "rent"


def test_read_text_refuses_missing_folder_and_binary(tmp_path):
    with pytest.raises(InputError, match="JOB: .* file not found"):
        read_text(tmp_path / "nope.yaml", "JOB")
    with pytest.raises(InputError, match="is a folder; give the path of a job spec"):
        read_text(tmp_path, "JOB", "job spec")
    (tmp_path / "b.bin").write_bytes(b"ok\xff\xfe")
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 2\)"):
        read_text(tmp_path / "b.bin", "JOB")


def test_load_yaml_names_the_line_and_reads_empty_as_none(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\nb: [unclosed\nc: :\n")
    with pytest.raises(InputError, match="line 3"):
        load_yaml(bad, "JOB")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_yaml(empty, "JOB") is None


def test_check_output_file(tmp_path):
    check_output_file("--plot", str(tmp_path / "a.PNG"), (".png", ".svg"))   # case-insensitive
    with pytest.raises(InputError, match="ending in .png or .svg"):
        check_output_file("--plot", str(tmp_path / "a.txt"), (".png", ".svg"))
    with pytest.raises(InputError, match="is a folder"):
        check_output_file("--plot", str(tmp_path), (".png",))
    with pytest.raises(InputError, match="does not exist"):
        check_output_file("--plot", str(tmp_path / "no" / "a.png"), (".png",))


def test_budget_weights_units_and_refusal():
    types = [JobType("a", 0.4, SizeDistribution(), PowerSpeedup(0.5), price=2.5),
             JobType("b", 0.4, SizeDistribution(), PowerSpeedup(0.5), price=4.0)]
    assert Budget(3.0, "gpus").weights(types) == [1.0, 1.0]
    assert Budget(30.0, "usd_per_hour").weights(types) == [2.5, 4.0]
    assert Budget(3.0).units == "GPUs" and Budget(3.0, "usd_per_hour").units == "USD/h"
    Budget(0.81).refuse_at_or_below(0.8, "x costs")            # above the floor: no error
    with pytest.raises(InputError, match="minimum feasible budget is above 0.8 GPUs"):
        Budget(0.8).refuse_at_or_below(0.8, "everything on 1 GPU already costs")


def test_parse_budget_mapping_form():
    assert parse_budget({"usd_per_hour": "30"}) == Budget(30.0, "usd_per_hour")
    with pytest.raises(InputError, match="budget.gpus: 'lots'"):
        parse_budget({"gpus": "lots"})
    with pytest.raises(InputError, match="budget.gpus: -1 .* positive"):
        parse_budget({"gpus": -1})


@settings(max_examples=50, deadline=None)
@given(c=st.floats(1e-3, 1e3), b=st.floats(1e-2, 1e2))
def test_bracket_mu_brackets_the_root_of_a_decreasing_spend(c, b):
    # spend(mu) = c/mu falls in mu; its budget root is mu* = c/b
    lo, hi = bracket_mu(lambda mu: c / mu, b, "unreachable")
    assert c / lo > b >= c / hi
    assert lo < c / b * (1 + 1e-9) and hi > c / b * (1 - 1e-9)
    assert hi / lo - 1 < 1e-12


def test_bracket_mu_refuses_an_unreachable_budget():
    with pytest.raises(InputError, match="cannot be met"):
        bracket_mu(lambda mu: 1.0 + 1.0 / mu, 0.5, "cannot be met")


def test_solver_still_reproduces_the_papers_reference_point():
    """papers.md A.4: b = 2 -> k = (6, 9), E[T] = 1/3, mu = 1/9 (to 1e-6)."""
    sol = solve(load_spec(EXAMPLES / "fig1.yaml").types, Budget(2.0))
    assert [a.k for a in sol.types] == pytest.approx([6, 9], abs=1e-6)
    assert sol.mean_response_time == pytest.approx(1 / 3, abs=1e-6)
    assert sol.mu == pytest.approx(1 / 9, abs=1e-6) and math.isfinite(sol.mu)
