"""Parsing request bodies into job specs, and rendering job rows as API JSON.

A body is a job spec (the schema of `gpuwise plan` job files) as JSON or as the YAML file itself
(``Content-Type: application/yaml``), or the short form ``{"preset", "amount", "global_batch",
"constraints"...}``. Every bad body becomes the same `InputError` the CLI prints (field, value, fix).
"""

from __future__ import annotations

import json
from typing import Any

from gpuwise.errors import InputError
from gpuwise.service.limits import MAX_DEPTH, check_model, check_tree, flow_depth, load_yaml_text
from gpuwise.workload.jobspec import JobSpec, parse_job

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
PRESET_KEYS = {"preset", "amount", "global_batch", "name", "seq_len", "constraints", "precision", "optimizer",
               "recompute", "lr_scaling", "noise_scale", "micro_batch"}


def parse_body(raw: bytes, content_type: str | None) -> Any:
    """JSON or YAML text -> data (a mapping is expected by the callers), within `limits.check_tree`."""
    ctype = (content_type or "application/json").split(";")[0].strip().lower()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("body", f"byte {exc.start}", "send UTF-8 JSON or YAML text") from None
    if ctype not in YAML_TYPES and ctype != "application/json":
        raise InputError("Content-Type", ctype, "send application/json or application/yaml")
    depth = flow_depth(text)
    if depth > MAX_DEPTH:
        raise InputError("body", f"nested {depth} deep", f"nest at most {MAX_DEPTH} levels (a job spec has 3)")
    try:
        data = _yaml(text) if ctype in YAML_TYPES else _json(text)
    except RecursionError:      # YAML's block style nests by indentation
        raise InputError("body", "nested too deep", f"nest at most {MAX_DEPTH} levels (a job spec has 3)") from None
    check_tree(data)
    return data


def _yaml(text: str) -> Any:
    import yaml

    try:
        return load_yaml_text(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError("body", f"line {mark.line + 1}" if mark else "YAML",
                         f"not valid YAML ({getattr(exc, 'problem', None) or exc})") from None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("body", f"line {exc.lineno} column {exc.colno}", f"not valid JSON ({exc.msg})") from None


def spec_from_body(data: Any) -> JobSpec:
    """A job spec from a parsed body: the full schema, or the preset short form; its model a preset or
    inline numbers (`limits.check_model`)."""
    if isinstance(data, dict) and "preset" in data:
        from gpuwise.plan.submit import spec_from_preset

        extra = sorted(set(data) - PRESET_KEYS)
        if extra:
            raise InputError(extra[0], data[extra[0]], "unknown field of the preset form; valid: "
                             + ", ".join(sorted(PRESET_KEYS)))
        if "global_batch" not in data:
            raise InputError("global_batch", None, "required field is missing")
        rest = {k: v for k, v in data.items() if k not in ("preset", "amount", "global_batch", "name",
                                                            "seq_len", "constraints")}
        spec = spec_from_preset(data["preset"], data.get("amount"), data["global_batch"], name=data.get("name"),
                                seq_len=data.get("seq_len"), constraints=data.get("constraints"), **rest)
        check_model(spec.model, "preset")
        return spec
    spec = parse_job(data)
    check_model(spec.model)
    return spec


def job_json(row: dict, user_name: str | None = None, history: list[dict] | None = None) -> dict:
    """One job as the API shows it."""
    jct = (row["finished_sim"] - row["submitted_sim"]) if row["state"] == "done" and row["finished_sim"] is not None \
        and row["submitted_sim"] is not None else None
    out = {
        "id": row["id"], "name": row["name"], "user": user_name, "state": row["state"],
        "progress": round(float(row["progress"]), 6), "allocation": row["allocation"],
        "gpus": (row["allocation"] or {}).get("gpus", 0),
        "measured_speed_per_s": row["measured_speed"], "restarts": row["restarts"],
        "attained_gpu_s": round(float(row["attained_gpu_s"]), 3),
        "submitted_at": row["submitted_at"], "submitted_s": row["submitted_sim"],
        "started_s": row["started_sim"], "finished_s": row["finished_sim"], "jct_s": jct,
        "max_gpus": row["max_gpus"], "message": row["message"],
        "prediction": row["prediction"],
    }
    if history is not None:
        out["allocation_history"] = history
    return out


def event_json(e: dict) -> dict:
    return {"id": e["id"], "at": e["at"], "at_s": e["at_sim"], "kind": e["kind"], "detail": e["detail"]}
