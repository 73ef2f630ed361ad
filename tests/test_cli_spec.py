"""`gpuwise spec`: the annotated example is a valid job spec that documents every field of the
pydantic model, `--schema` is that model's JSON schema, and docs/job-spec.md shows the same example."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import yaml

from gpuwise.cli.main import main
from gpuwise.workload.jobspec import JobSpec, parse_job
from gpuwise.workload.jobspec_doc import INTERNAL

ROOT = Path(__file__).resolve().parent.parent


def _out(capsys, *argv) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _keys(model, prefix="") -> set[str]:
    keys = set()
    for name, f in model.model_fields.items():
        if name in INTERNAL:
            continue
        keys.add(prefix + name)
        sub = f.annotation if isinstance(f.annotation, type) and hasattr(f.annotation, "model_fields") else None
        if sub is not None:
            keys |= _keys(sub, prefix + name + ".")
    return keys


def test_example_is_a_valid_spec_naming_every_field(capsys):
    text = _out(capsys, "spec")
    data = yaml.safe_load(text)
    spec = parse_job(data)
    assert spec.model == "llama-3.1-8b" and spec.training.tokens == 1e11 and spec.constraints.spot is True
    # every field of the model is on a line of its own, set or commented out, with a comment
    written, stack = set(), []
    for line in text.splitlines():
        m = re.match(r"^( *)(?:# )?([a-z_0-9]+):.*  # \S", line)
        if m and not line.startswith("# gpuwise") and not line.startswith("# model:"):
            depth = len(m.group(1)) // 2
            stack[depth:] = [m.group(2)]
            written.add(".".join(stack))
    missing = _keys(JobSpec) - written
    assert not missing, missing
    # the schema accepts the example and refuses what the model refuses
    schema = json.loads(_out(capsys, "spec", "--schema"))
    jsonschema.validate(data, schema)
    assert "source_path" not in schema["properties"] and set(schema["required"]) == {"model", "training"}
    bad = {**data, "training": {**data["training"], "tokens": -5}}
    try:
        jsonschema.validate(bad, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the schema accepted tokens: -5")


def test_docs_show_the_printed_example(capsys):
    doc = (ROOT / "docs/job-spec.md").read_text()
    assert _out(capsys, "spec") in doc, "docs/job-spec.md is stale: paste `gpuwise spec` into it"
