"""YAML input of `gpuwise rent`: the issue's minimal form and errors naming the YAML path."""

import pytest
import yaml

from gpuwise.errors import InputError
from gpuwise.plan.rent.spec import parse_budget, parse_spec
from gpuwise.plan.rent.speedup import AmdahlSpeedup, PiecewiseLinearSpeedup, PowerSpeedup

MINIMAL = yaml.safe_load("""
types:
  - name: a
    arrival_rate: 0.4
    mean_size: 1.0
    speedup: {amdahl: 0.8}
    max_gpus: 64
  - name: b
    arrival_rate: 0.4
    mean_size: 1.0
    speedup: {power: 0.5}
  - name: c
    arrival_rate: 0.1
    mean_size: 2.0
    speedup: {table: {1: 1.0, 2: 1.9, 4: 3.4}}
""")


def test_issue_form_is_accepted():
    spec = parse_spec(MINIMAL)
    a, b, c = spec.types
    assert isinstance(a.speedup, AmdahlSpeedup) and a.speedup.cap == 64 and a.load == pytest.approx(0.4)
    assert isinstance(b.speedup, PowerSpeedup) and b.speedup.cap == float("inf")
    assert isinstance(c.speedup, PiecewiseLinearSpeedup) and c.speedup.cap == 4
    assert a.sizes.kind == "exponential"


@pytest.mark.parametrize("path, value, match", [
    ("types.0.speedup", {"amdahl": 1.3}, r"types\[0\]\.speedup\.amdahl"),
    ("types.0.speedup", {"amdal": 0.8}, r"types\[0\]\.speedup.*did you mean amdahl"),
    ("types.1.arrival_rate", -1, r"types\[1\]\.arrival_rate"),
    ("types.1.max_gpus", 0.5, r"types\[1\]\.max_gpus"),
    ("types.2.speedup", {"table": {2: 1.9, 4: 3.4}}, r"types\[2\]\.speedup\.table.*1: 1\.0"),
    ("types.2.speedup", {"table": {1: 1.0, 2: 2.5}}, r"types\[2\]\.speedup\.table\[2\].*above linear"),
    ("types.0.size_distribution", {"pareto": 0.9}, r"types\[0\]\.size_distribution\.pareto.*alpha"),
    ("types.0.size_distribution", "weibull", r"types\[0\]\.size_distribution"),
    ("types.0.colour", "red", r"types\[0\]\.colour"),
    ("types.0.speedup", {"job": "job.yaml", "gpu": "H100", "gpus_per_node": "eight"},
     r"types\[0\]\.speedup\.gpus_per_node.*whole number"),
    ("types.0.speedup", {"job": "job.yaml", "gpu": "H100", "gpus_per_node": 2.5},
     r"types\[0\]\.speedup\.gpus_per_node.*whole number"),
])
def test_errors_name_the_yaml_path(path, value, match):
    import copy

    data = copy.deepcopy(MINIMAL)
    node = data
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    with pytest.raises(InputError, match=match):
        parse_spec(data)


def test_missing_size_and_duplicate_names():
    data = yaml.safe_load("types: [{name: a, arrival_rate: 1, speedup: {power: 0.5}}]")
    with pytest.raises(InputError, match=r"types\[0\]\.mean_size"):
        parse_spec(data)
    dup = {"types": [MINIMAL["types"][0], MINIMAL["types"][0]]}
    with pytest.raises(InputError, match=r"types\[1\]\.name"):
        parse_spec(dup)


def test_size_sample_and_distributions():
    data = yaml.safe_load("""
types:
  - {name: s, arrival_rate: 1, sizes: [1, 2, 3], speedup: {power: 0.5}}
  - {name: l, arrival_rate: 1, mean_size: 2, size_distribution: {lognormal: 1.5}, speedup: {power: 0.5}}
  - {name: p, arrival_rate: 1, mean_size: 2, size_distribution: {pareto: 2.5}, speedup: {power: 0.5}}
""")
    s, l, p = parse_spec(data).types
    assert s.mean_size == pytest.approx(2.0) and s.sizes.kind == "empirical"
    assert (l.sizes.kind, l.sizes.shape) == ("lognormal", 1.5)
    assert (p.sizes.kind, p.sizes.shape) == ("pareto", 2.5)


def test_budget_forms():
    assert parse_budget(2) .amount == 2 and parse_budget("2").unit == "gpus"
    assert parse_budget("30usd/h").unit == "usd_per_hour" and parse_budget("$30").amount == 30
    assert parse_budget({"usd_per_hour": 12}).unit == "usd_per_hour"
    for bad in ("two", "-1", "0"):
        with pytest.raises(InputError, match="budget"):
            parse_budget(bad)


def test_budget_in_the_file_in_usd():
    spec = parse_spec(yaml.safe_load("""
budget: 30usd/h
price_per_gpu_hour: 2.5
types: [{name: a, arrival_rate: 0.4, mean_size: 1, speedup: {amdahl: 0.8}, price_per_gpu_hour: 4}]
"""))
    assert spec.budget.unit == "usd_per_hour" and spec.budget.amount == 30
    assert spec.types[0].price == 4
