"""Speedups derived from the shared performance model (gpuwise.estimate.job_model) for the rent
solver: goodput speedup tables replaced by their concave hull (papers.md A.3.4)."""

import numpy as np
import pytest
import yaml

from gpuwise.errors import InputError
from gpuwise.estimate.job_model import JobModel
from gpuwise.plan.rent.perfmodel import from_job, from_pollux
from gpuwise.plan.rent.solver import Budget, solve
from gpuwise.plan.rent.spec import load_spec, parse_spec


def test_pollux_speedup_is_the_jobmodel_goodput_ratio_hull():
    d = from_pollux("imagenet", 32, "types[0].speedup.pollux")
    jm = JobModel.for_pollux_app("imagenet")
    for k, v in d.table.items():
        assert v == pytest.approx(min(jm.speedup(k), k), rel=1e-12)
        assert float(d.speedup(k)) >= v - 1e-12  # the hull dominates the points
    w, s = np.array(d.speedup.widths), np.array(d.speedup.speeds)
    assert np.all(np.diff(np.diff(s) / np.diff(w)) <= 1e-12)  # concave
    assert d.single_gpu_hours == pytest.approx(jm.time_to_target(1) / 3600, rel=1e-12)


def test_job_spec_speedup_through_analytical_step_time():
    d = from_job("examples/resnet50-imagenet.yaml", "V100", 16, "types[0].speedup")
    assert d.speedup.cap == 16 and d.table[1] == 1.0
    assert 1.0 < d.table[16] <= 16 and d.single_gpu_hours > 0


def test_unknown_app_and_missing_gpu_name_the_path():
    with pytest.raises(InputError, match=r"types\[0\]\.speedup\.pollux"):
        parse_spec(yaml.safe_load("types: [{name: x, arrival_rate: 1, speedup: {pollux: imagenett}}]"))
    with pytest.raises(InputError, match=r"types\[0\]\.speedup"):
        parse_spec(yaml.safe_load("types: [{name: x, arrival_rate: 1, speedup: {job: a.yaml}}]"))


@pytest.mark.slow  # fits two Pollux profiles (2-6 s)
def test_example_stream_solves_and_binds():
    spec = load_spec("examples/rent/pollux_mix.yaml")
    assert [t.name for t in spec.types] == ["imagenet", "cifar10", "resnet50-v100"]
    sol = solve(spec.types, Budget(6.0))
    assert sol.budget_used == pytest.approx(6.0, rel=1e-9)
    assert sum(len(a.widths) > 1 for a in sol.types) <= 1
    usd = solve(spec.types, Budget(17.0, "usd_per_hour"))
    assert usd.budget_used == pytest.approx(17.0, rel=1e-9)
