"""The job spec's reference, written from the pydantic model in `gpuwise.workload.jobspec` (no second
copy of the schema): an annotated example (YAML, a comment per field from its description) and the
JSON schema. `gpuwise spec` prints them; docs/job-spec.md shows the example."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gpuwise.workload.jobspec import ExplicitModel, JobSpec

# The values the example shows (Llama-3.1-8B pre-training, as examples/llama-3.1-8b-pretrain.yaml);
# every other field shows its default, and optional fields without one are shown commented out.
EXAMPLE: dict[str, Any] = {
    "name": "llama-3.1-8b-pretrain", "model": "llama-3.1-8b",
    "training": {"tokens": 1.0e11, "seq_len": 8192, "global_batch": 512, "recompute": "selective"},
    "parallelism": {"tp": [1, 2, 4, 8], "pp": [1, 2, 4], "zero": [1, 2, 3]},
    "deadline_hours": 720, "budget_usd": 400000,
    "constraints": {"gpus": ["H100", "A100-80GB", "H200"], "max_gpus": 256, "spot": True},
}
# the other form of `model`: a model given by numbers (ResNet-50's published size and FLOPs)
EXPLICIT_EXAMPLE = {"name": "resnet50", "params": 25.6e6, "flops_per_sample": 4.1e9, "sample_unit": "image"}
INTERNAL = ("source_path",)   # set by load_job from the file's path, not written by users
COMMENT_AT = 40


def scalar(v: Any) -> str:
    """A YAML value that PyYAML reads back as the same value (1.0e+11, not 1e11, which it reads as text)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and abs(v) >= 1e6:
        mantissa, exp = f"{v:.3e}".split("e")
        mantissa = mantissa.rstrip("0")
        return f"{mantissa}0e{exp}" if mantissa.endswith(".") else f"{mantissa}e{exp}"
    if isinstance(v, list):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    if isinstance(v, str):
        return v if v and v.replace("-", "").replace(".", "").replace("_", "").isalnum() else f'"{v}"'
    return str(v)


def _line(indent: int, key: str, value: str | None, comment: str, off: bool = False) -> str:
    text = " " * indent + ("# " if off else "") + f"{key}:" + (f" {value}" if value is not None else "")
    return f"{text.ljust(COMMENT_AT)}  # {comment}" if comment else text


def _fields(model: type[BaseModel], values: dict, indent: int) -> list[str]:
    lines = []
    for name, f in model.model_fields.items():
        if name in INTERNAL:
            continue
        sub = _submodel(f.annotation)
        doc = f.description or (sub.__doc__ or "").strip().splitlines()[0] if sub else f.description or ""
        if sub is not None and name not in ("model",):
            lines.append(_line(indent, name, None, doc))
            lines += _fields(sub, values.get(name, {}), indent + 2)
        elif name in values:
            lines.append(_line(indent, name, scalar(values[name]), doc))
        elif f.is_required():
            lines.append(_line(indent, name, "REQUIRED", doc))
        elif f.default is None:
            lines.append(_line(indent, name, "null", doc, off=True))
        else:
            default = f.default_factory() if f.default_factory else f.default
            lines.append(_line(indent, name, scalar(default), doc))
        if name == "model":
            lines.append(_line(indent, "model", None, "... or a model given by its numbers:", off=True))
            lines += [_line(indent + 2, k, scalar(EXPLICIT_EXAMPLE.get(k, g.default)), g.description or "", off=True)
                      for k, g in ExplicitModel.model_fields.items()]
    return lines


def _submodel(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def annotated_example() -> str:
    """The example job spec as YAML, every field with its description; commented-out lines are
    optional fields left unset (and the other form of `model`)."""
    head = ["# gpuwise job spec: one training job (gpuwise plan / estimate / submit JOB.yaml).",
            "# Lines starting with '# key:' are optional fields left unset; `gpuwise spec --schema` prints the",
            "# JSON schema. Training amount: exactly one of tokens | samples | epochs (+ dataset_samples) |",
            "# steps (+ reference_batch)."]
    return "\n".join(head + _fields(JobSpec, EXAMPLE, 0)) + "\n"


def json_schema() -> dict:
    """JSON schema of a job spec, from the pydantic model (internal fields left out)."""
    schema = JobSpec.model_json_schema()
    for key in INTERNAL:
        schema.get("properties", {}).pop(key, None)
    return schema
