"""DeepVM (papers.md D): FLOPP, SF(n), n_sat, the two architectures, baselines and Fig. 8.

Golden target: DeepVM artifact's AWS run at PW = $3/h (papers.md D.8, Fig. 8) — configurations
and hourly prices reproduced exactly (prices to 1e-9 USD/h).
"""

from __future__ import annotations

import itertools
import json
import math
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from gpuwise.cli.main import main
from gpuwise.errors import InputError
from gpuwise.plan.deepvm.architectures import SINGLE_ANCHOR, TIERING
from gpuwise.plan.deepvm.data import load_deepvm
from gpuwise.plan.deepvm.flopp import flopp
from gpuwise.plan.deepvm.optimizer import deepvm, min_budget, recommend
from gpuwise.plan.deepvm.overheads import modelled_speedup, n_sat, scaling_factor

DATA = load_deepvm()
INST = {i.name: i for i in DATA.instances}


def test_flopp_matches_papers_table():
    # papers.md D.2: spot FLOPP 1.600e6 / 8.60e6 / 8.30e6 (3 significant digits)
    assert flopp(INST["g3s.xlarge"]) == pytest.approx(1.600e6, rel=5e-3)
    assert flopp(INST["g4dn.xlarge"]) == pytest.approx(8.60e6, rel=5e-3)
    assert flopp(INST["g5.xlarge"]) == pytest.approx(8.30e6, rel=5e-3)


@pytest.mark.parametrize("name,n,expected", [
    # papers.md D.3 SF table (derived from the artifact's parameters, 4 decimals)
    ("g3s.xlarge", 16, 0.9996), ("g3s.xlarge", 24, 0.9492), ("g3s.xlarge", 31, 0.8425),
    ("g4dn.xlarge", 17, 0.9947), ("g4dn.xlarge", 20, 0.9775), ("g4dn.xlarge", 28, 0.8779),
    ("g5.xlarge", 20, 1.0), ("g5.xlarge", 24, 0.9987), ("g5.xlarge", 31, 0.9788),
])
def test_scaling_factor_table(name, n, expected):
    assert scaling_factor(DATA.scaling[name], n) == pytest.approx(expected, abs=1e-4)


def test_modelled_speedup_fig5():
    # papers.md D.8 Fig. 5 "model" rows (2 decimals): g4dn at n = 1, 16, 32; g3s at n = 8
    p = DATA.scaling["g4dn.xlarge"]
    assert [round(modelled_speedup(p, n), 2) for n in (1, 16, 32)] == [0.63, 3.73, 5.73]
    assert round(modelled_speedup(DATA.scaling["g3s.xlarge"], 8), 2) == 3.67


def test_n_sat_lookup_exact_and_floor():
    table = DATA.saturation
    assert [n_sat(table, b) for b in (0.3, 1.7, 5, 10, 12.5, 15, 25, 30)] == [2, 12, 16, 20, 24, 24, 28, 32]
    assert n_sat(table, 11) == 20 and n_sat(table, 100) == 32 and n_sat(table, 0.1) == 2


def test_fig8_exact():
    res = recommend(DATA, 3.0, top=3)
    got = [(c.architecture, c.gpu_instance, c.gpu_nodes, c.spot_gpu_nodes, c.remote_instance,
            c.remote_nodes) for c in res.ranked]
    assert got == [(TIERING, "g4dn.xlarge", 17, 17, "c5.xlarge", 1),
                   (TIERING, "g4dn.xlarge", 17, 17, "m6i.xlarge", 1),
                   (TIERING, "g4dn.xlarge", 17, 17, "c5n.xlarge", 1)]
    assert [c.hourly_usd for c in res.ranked] == pytest.approx([2.8526, 2.8746, 2.8986], abs=1e-9)
    assert res.ranked[0].objective == pytest.approx(1.454e8, rel=1e-3)   # shared Z (D.8)
    cf, pf = res.cost_first, res.performance_first
    assert (cf.architecture, cf.gpu_instance, cf.gpu_nodes, cf.spot_gpu_nodes) == (SINGLE_ANCHOR, "g4dn.xlarge", 16, 15)
    assert cf.hourly_usd == pytest.approx(2.893, abs=1e-9)
    assert (pf.architecture, pf.gpu_instance, pf.gpu_nodes, pf.spot_gpu_nodes) == (SINGLE_ANCHOR, "g5.xlarge", 7, 6)
    assert pf.hourly_usd == pytest.approx(2.8168, abs=1e-9)
    # DeepVM-NoScale picks the same cluster (D.8)
    assert (res.noscale.gpu_nodes, res.noscale.remote_instance) == (17, "c5.xlarge")


def test_fig6_tiering_needs_three_remotes():
    # D.8 Fig. 6 [derived]: 29 g4dn trainers with c4.xlarge remotes need m = 3 (n_sat(1.7) = 12)
    configs = deepvm(DATA, 100.0)
    c = [c for c in configs if c.architecture == TIERING and c.gpu_nodes == 29
         and c.gpu_instance == "g4dn.xlarge" and c.remote_instance == "c4.xlarge"]
    assert len(c) == 1 and c[0].remote_nodes == 3


def _brute_force_best_z(budget: float, need_gb: float) -> float:
    """Independent check: every (v, n) SA and every (v, w, n, m) tiering point, no pruning."""
    best = -math.inf
    for v in DATA.gpu_instances:
        nv = DATA.max_nodes(v, spot=True)
        for n in range(1, nv):
            z = flopp(v) * n * scaling_factor(DATA.scaling[v.name], n)
            if n >= 2 and v.ondemand_price + (n - 1) * v.spot_price <= budget + 1e-9:
                best = max(best, z)
            for w, m in itertools.product(DATA.remote_instances, range(1, 64)):
                if (w.memory_gb >= need_gb and n / m < n_sat(DATA.saturation, min(v.network_gbps, w.network_gbps))
                        and n * v.spot_price + m * w.ondemand_price <= budget + 1e-9):
                    best = max(best, z)
                    break
    return best


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0.2, max_value=12.0))
def test_optimum_equals_brute_force(budget):
    configs = deepvm(DATA, budget)
    brute = _brute_force_best_z(budget, 0.1)
    if not configs:
        assert brute == -math.inf
        return
    assert configs[0].objective == pytest.approx(brute, rel=1e-12)
    assert all(c.hourly_usd <= budget + 1e-9 for c in configs)


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0.3, max_value=10.0), st.floats(min_value=0.01, max_value=3.0))
def test_more_budget_never_worse(budget, extra):
    a, b = deepvm(DATA, budget), deepvm(DATA, budget + extra)
    if a:
        assert b[0].objective >= a[0].objective


def test_min_budget_is_tight():
    need = min_budget(DATA)
    assert deepvm(DATA, need) and not deepvm(DATA, need - 1e-4)


def test_cli_json_fig8(capsys):
    assert main(["deepvm", "--budget", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    top = out["deepvm"][0]
    assert (top["architecture"], top["gpu_instance"], top["gpu_nodes"], top["spot_gpu_nodes"],
            top["remote_instance"], top["remote_nodes"]) == ("tiering", "g4dn.xlarge", 17, 17, "c5.xlarge", 1)
    assert out["cost_first"]["gpu_nodes"] == 16 and out["cost_first"]["remote_nodes"] == 0
    assert out["cost_first"]["remote_instance"] is None
    assert out["performance_first"]["gpu_instance"] == "g5.xlarge" and out["performance_first"]["gpu_nodes"] == 7
    assert out["assumptions"]


def test_cli_data_dir_and_errors(tmp_path, capsys):
    d = tmp_path / "dv"
    shutil.copytree(DATA.source, d)
    # make g5 spot very cheap: it must now win
    text = (d / "instances.csv").read_text().replace("1.006,0.3018", "1.006,0.05")
    (d / "instances.csv").write_text(text)
    assert main(["deepvm", "--budget", "3", "--json", "--data", str(d)]) == 0
    assert json.loads(capsys.readouterr().out)["deepvm"][0]["gpu_instance"] == "g5.xlarge"
    assert main(["deepvm", "--budget", "0"]) == 2
    assert main(["deepvm", "--data", str(tmp_path / "none")]) == 2
    (d / "quotas.csv").unlink()
    with pytest.raises(InputError):
        load_deepvm(d)


def test_cli_budget_too_small(capsys):
    assert main(["deepvm", "--budget", "0.1", "--json"]) == 1   # no feasible answer
    out = json.loads(capsys.readouterr().out)
    assert out["deepvm"] == [] and out["infeasible"]["min_budget_usd_per_hour"] == pytest.approx(0.3242)
