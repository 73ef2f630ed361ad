"""Write the chosen configuration as a SkyPilot task YAML, and validate it.

Validation uses SkyPilot itself (`sky.Task.from_yaml_config`) when it is importable, otherwise
the bundled subset of SkyPilot's published task schema (gpuwise/data/skypilot/task_schema.json)
with jsonschema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from gpuwise.data import data_path

_SAFE_NAME = re.compile(r"[^a-z0-9-]+")

SETUP_PLACEHOLDER = """\
# EDIT ME: install your training code and its dependencies (runs once per node).
# e.g. pip install -r requirements.txt
echo "gpuwise: edit 'setup' in this task file"
"""

RUN_PLACEHOLDER = """\
# EDIT ME: launch your trainer. SkyPilot sets SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS,
# SKYPILOT_NUM_NODES and SKYPILOT_NUM_GPUS_PER_NODE; the GPUWISE_* envs below carry the plan.
MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
echo "gpuwise plan: dp=$GPUWISE_DP tp=$GPUWISE_TP pp=$GPUWISE_PP global batch=$GPUWISE_GLOBAL_BATCH"
echo torchrun --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK \\
  --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE --master_addr=$MASTER_ADDR --master_port=29500 \\
  train.py  # <- replace with your script and its flags
"""


@dataclass(frozen=True)
class ExportChoice:
    """What the task must request: one row of the planner's candidates."""

    job_name: str
    cloud: str
    region: str
    instance_type: str
    accelerator: str            # SkyPilot accelerator name, e.g. "H100", "A100-80GB"
    gpus_per_node: float
    nodes: int
    spot: bool
    envs: dict[str, str]        # plan details passed to the run script (GPUWISE_*)
    summary: str                # one line for the file's header comment
    zone: str | None = None     # the zone whose price was planned on (pinned for spot)


def task_config(choice: ExportChoice) -> dict:
    """The task as the dict SkyPilot's YAML loader expects."""
    count = choice.gpus_per_node
    count_txt = str(int(count)) if float(count).is_integer() else f"{count:g}"
    name = _SAFE_NAME.sub("-", choice.job_name.lower()).strip("-") or "gpuwise-job"
    resources = {
        "cloud": choice.cloud,
        "region": choice.region,
        "instance_type": choice.instance_type,
        "accelerators": f"{choice.accelerator}:{count_txt}",
        "use_spot": bool(choice.spot),
    }
    if choice.spot:
        # the plan priced this zone's spot price, and spot prices differ per zone: pin it, or SkyPilot may
        # launch (and be billed) elsewhere
        if choice.zone:
            resources["zone"] = choice.zone
        # managed spot jobs relaunch on preemption; the trainer must resume from its checkpoint
        resources["job_recovery"] = "FAILOVER"
    return {
        "name": name,
        "num_nodes": int(choice.nodes),
        "resources": resources,
        "envs": {k: str(v) for k, v in choice.envs.items()},
        "setup": SETUP_PLACEHOLDER,
        "run": RUN_PLACEHOLDER,
    }


def to_yaml(config: dict, header: list[str]) -> str:
    """YAML text with `header` as comments; setup/run as literal blocks so they stay editable."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper, value: str):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    body = yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return "".join(f"# {line}\n" for line in header) + body


@lru_cache(maxsize=1)
def _schema() -> dict:
    return json.loads(data_path("skypilot", "task_schema.json").read_text())


def validate(config: dict) -> tuple[bool, str]:
    """(ok, how) — SkyPilot's own parser if installed, else the bundled schema subset."""
    try:
        import sky  # type: ignore[import-not-found]
    except Exception:  # not installed (or broken install): fall back to the schema
        sky = None
    if sky is not None:
        try:
            sky.Task.from_yaml_config(config)
        except Exception as exc:  # noqa: BLE001 - report SkyPilot's own message
            return False, f"sky.Task.from_yaml_config rejected it: {exc}"
        return True, f"accepted by sky.Task.from_yaml_config (skypilot {getattr(sky, '__version__', '?')})"
    try:
        import jsonschema
    except ImportError:
        return False, "not validated: neither skypilot nor jsonschema is installed"
    errors = sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(config), key=str)
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        return False, f"SkyPilot task schema: {where}: {e.message}"
    return True, "valid against SkyPilot's task schema (bundled subset, gpuwise/data/skypilot)"


def write_task(choice: ExportChoice, path: str | Path) -> tuple[dict, str]:
    """Write the task file; returns (config, validation note). Raises ValueError if invalid."""
    config = task_config(choice)
    ok, how = validate(config)
    if not ok:
        raise ValueError(how)
    header = [
        f"SkyPilot task written by `gpuwise plan` for {choice.job_name}",
        choice.summary,
        "Launch: sky jobs launch THIS_FILE (spot, managed recovery) or sky launch THIS_FILE",
        "Edit the `setup` and `run` sections (marked EDIT ME) before launching.",
    ]
    Path(path).write_text(to_yaml(config, header))
    return config, how


@lru_cache(maxsize=None)
def _catalog_accelerators(source: str) -> tuple[dict[str, str], dict[str, str]]:
    """From a SkyPilot vms.csv: instance type -> AcceleratorName, and canonical GPU -> the first
    AcceleratorName that resolves to it (GCP attaches GPUs to hosts without naming them per row)."""
    import csv

    from gpuwise.hardware.gpus import resolve_gpu_name

    path = Path(source)
    if not path.is_absolute() and not path.exists():
        path = data_path().parent.parent / source   # catalog_source is relative to the repo root
    by_type: dict[str, str] = {}
    by_gpu: dict[str, str] = {}
    canonical: dict[str, str | None] = {}    # thousands of rows, a few dozen accelerator names
    if not path.exists():
        return by_type, by_gpu
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            acc = (row.get("AcceleratorName") or "").strip()
            if not acc:
                continue
            it = (row.get("InstanceType") or "").strip()
            if it:
                by_type.setdefault(it, acc)
            if acc not in canonical:
                canonical[acc] = resolve_gpu_name(acc)
            canon = canonical[acc]
            if canon:
                by_gpu.setdefault(canon, acc)
    return by_type, by_gpu


def accelerator_name(offering) -> str:
    """SkyPilot's accelerator name for an offering (RegionOffering or Offering): the catalog's own
    AcceleratorName for that instance type, else the catalog's name of that GPU, else the first
    short alias of the GPU table."""
    ex = getattr(offering, "example", offering)
    by_type, by_gpu = _catalog_accelerators(ex.catalog_source)
    if ex.instance_type in by_type:
        return by_type[ex.instance_type]
    if ex.gpu in by_gpu:
        return by_gpu[ex.gpu]
    from gpuwise.hardware.gpus import get_gpu

    spec = get_gpu(ex.gpu)
    return min((spec.name, *spec.aliases), key=len)
