"""Job-spec values that crashed the service or `gpuwise plan` (issue 23): one-line errors naming the
field, or an answer that says what it did not count. Library and CLI in process, no server."""

from __future__ import annotations

import json

import pytest

from gpuwise.errors import InputError
from gpuwise.service.limits import check_tree, echo, flow_depth, load_yaml_text
from gpuwise.workload.jobspec import parse_job


def _spec(**training):
    return {"model": "gpt2", "training": {"samples": 1e6, "global_batch": 8, **training}}


@pytest.mark.parametrize("training, field, words", [
    ({"global_batch": True}, "training.global_batch", "not true/false"),
    ({"global_batch": [True, 8]}, "training.global_batch", "not true/false"),
    ({"samples": True}, "training.samples", "not true/false"),
    ({"seq_len": False}, "training.seq_len", "not true/false"),
    ({"global_batch": 1e12}, "training.global_batch", "at most 2,147,483,647"),
    ({"global_batch": 1e30}, "training.global_batch", ""),
    ({"micro_batch": 2**40}, "training.micro_batch", "<= 2147483647"),
])
def test_booleans_and_huge_counts_name_the_field(training, field, words):
    with pytest.raises(InputError) as err:
        parse_job(_spec(**training))
    assert err.value.field == field and words in str(err.value)


def test_a_real_boolean_field_still_takes_true():
    assert parse_job({**_spec(), "constraints": {"spot": True}}).constraints.spot is True


def test_tree_bounds_name_the_path():
    deep: list = []
    for _ in range(20):
        deep = [deep]
    for data, field in ([[{"a": {"b": float("nan")}}], "[0].a.b"], [{"training": {"x": -1e19}}, "training.x"],
                        [{"name": "x" * 5000}, "name"], [deep, "[0]" * 13]):
        with pytest.raises(InputError) as err:
            check_tree(data)
        assert err.value.field == field
    assert flow_depth('{"a": [1, "]]{{[[\\"[["]}') == 2 and flow_depth("x: 'it''s [' ") == 0


def test_yaml_aliases_are_refused_and_echoes_are_short():
    assert load_yaml_text("a: &x 1\nb: 2\n") == {"a": 1, "b": 2}       # an anchor alone is harmless
    with pytest.raises(InputError, match="aliases"):
        load_yaml_text("a: &x [1, 2]\nb: *x\n")
    assert len(json.dumps(echo("y" * 10**6))) < 300 and echo(float("nan")) == "nan" and echo(3) == 3


def test_explicit_model_without_activations_is_planned_and_says_so(tmp_path, capsys):
    from gpuwise.cli.main import main

    spec = tmp_path / "cnn.yaml"
    spec.write_text("name: cnn\nmodel: {name: cnn, params: 1.0e7, flops_per_sample: 1.0e9}\n"
                    "training: {samples: 1.0e6, global_batch: 64}\nconstraints: {gpus: [T4], clouds: [aws]}\n")
    assert main(["plan", str(spec), "--top", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chosen"]["memory_gib_per_gpu"] > 0
    assert any(a.startswith("activations: NOT counted") for a in out["assumptions"])
