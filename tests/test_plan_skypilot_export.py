"""SkyPilot task export: the written YAML parses back to the same task and passes SkyPilot's
task schema (bundled subset of the published spec, docs.skypilot.co yaml-spec; or
sky.Task.from_yaml_config when skypilot is importable)."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpuwise.plan.skypilot_export import ExportChoice, task_config, validate, write_task


def _choice(**kw) -> ExportChoice:
    base = dict(job_name="Llama 3.1 8B / pretrain", cloud="aws", region="us-east-1",
                instance_type="p5.48xlarge", accelerator="H100", gpus_per_node=8, nodes=2, spot=True,
                envs={"GPUWISE_DP": 16, "GPUWISE_GLOBAL_BATCH": 1024}, summary="test")
    base.update(kw)
    return ExportChoice(**base)


def test_written_file_round_trips_and_validates(tmp_path):
    path = tmp_path / "task.yaml"
    config, how = write_task(_choice(), path)
    text = path.read_text()
    assert text.startswith("# SkyPilot task written by `gpuwise plan`")
    loaded = yaml.safe_load(text)
    assert loaded == config
    r = loaded["resources"]
    assert (r["cloud"], r["region"], r["instance_type"], r["accelerators"], r["use_spot"]) == \
        ("aws", "us-east-1", "p5.48xlarge", "H100:8", True)
    assert loaded["num_nodes"] == 2 and loaded["name"] == "llama-3-1-8b-pretrain"
    assert "EDIT ME" in loaded["setup"] and "EDIT ME" in loaded["run"]
    assert loaded["envs"] == {"GPUWISE_DP": "16", "GPUWISE_GLOBAL_BATCH": "1024"}
    assert validate(loaded)[0], how


def test_on_demand_has_no_recovery_and_fractional_gpus():
    cfg = task_config(_choice(spot=False, gpus_per_node=0.5, accelerator="T4", nodes=1))
    assert cfg["resources"]["use_spot"] is False and "job_recovery" not in cfg["resources"]
    assert cfg["resources"]["accelerators"] == "T4:0.5"
    assert validate(cfg)[0]


@pytest.mark.parametrize("mutate,where", [
    (lambda c: c["resources"].update(gpu="H100"), "resources"),          # unknown key
    (lambda c: c["resources"].update(cloud="mycloud"), "resources/cloud"),
    (lambda c: c["resources"].update(use_spot="yes"), "resources/use_spot"),
    (lambda c: c.update(num_nodes=0), "num_nodes"),
    (lambda c: c["resources"].update(accelerators="H100:eight"), "resources/accelerators"),
    (lambda c: c["envs"].update({"BAD-NAME": "1"}), "envs"),
    (lambda c: c.update(nodes=2), "(top level)"),
])
def test_schema_rejects_invalid_tasks(mutate, where):
    cfg = copy.deepcopy(task_config(_choice()))
    mutate(cfg)
    ok, how = validate(cfg)
    assert not ok and where in how


def test_invalid_task_is_not_written(tmp_path):
    path = tmp_path / "t.yaml"
    with pytest.raises(ValueError):
        write_task(_choice(cloud="nocloud"), path)
    assert not path.exists()


def test_spot_task_is_pinned_to_the_planned_zone():
    """Spot prices differ per zone: the task launches where the plan priced it (on demand stays regional)."""
    spot = task_config(_choice(zone="us-east-1f"))
    assert spot["resources"]["zone"] == "us-east-1f" and validate(spot)[0]
    assert "zone" not in task_config(_choice(zone="us-east-1f", spot=False))["resources"]
