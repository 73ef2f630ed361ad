"""Loading the DeepVM tables (bundled `gpuwise/data/deepvm`, or a directory of the same files)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gpuwise.data import data_path
from gpuwise.errors import InputError

FILES = ("instances.csv", "scaling_factor_params.csv", "network_saturation.csv", "quotas.csv")


@dataclass(frozen=True)
class Instance:
    """One VM type of the DeepVM catalogue (row order is the catalogue order used for ties)."""

    name: str
    family: str                 # quota family: "G" = GPU VM, C/T/M/D = CPU VMs
    gpu: str | None             # accelerator name for GPU VMs, None for CPU VMs
    ondemand_price: float       # USD per instance-hour
    spot_price: float           # USD per instance-hour
    vcpus: int
    memory_gb: float            # host RAM (remote checkpoint buffer for CPU VMs)
    network_gbps: float
    eflops: float | None        # effective DL-throughput score (GPU VMs only)

    @property
    def is_gpu(self) -> bool:
        return self.family == "G"


@dataclass(frozen=True)
class ScalingParams:
    """Logistic fit S(n) = c / (1 + exp(-a (n - b))) of multi-node data-parallel speedup."""

    a: float
    b: float
    c: float


@dataclass(frozen=True)
class DeepVMData:
    instances: tuple[Instance, ...]
    scaling: dict[str, ScalingParams]          # GPU instance name -> SF fit
    saturation: tuple[tuple[float, int], ...]   # (min bandwidth Gbps, n_sat), ascending
    quotas: dict[str, tuple[int, int]]          # family -> (on-demand vCPUs, spot vCPUs)
    source: str                                 # directory the tables came from

    @property
    def gpu_instances(self) -> list[Instance]:
        return [i for i in self.instances if i.is_gpu]

    @property
    def remote_instances(self) -> list[Instance]:
        return [i for i in self.instances if not i.is_gpu]

    def max_nodes(self, inst: Instance, spot: bool) -> int:
        """N_v / M_w: how many VMs of this type the family's vCPU quota allows."""
        od, sp = self.quotas.get(inst.family, (0, 0))
        return (sp if spot else od) // max(inst.vcpus, 1)


# columns each table must have (others are ignored)
COLUMNS = {
    "instances.csv": ("name", "family", "ondemand_price", "spot_price", "vcpus", "memory_gb", "network_gbps"),
    "scaling_factor_params.csv": ("instance", "a", "b", "c"),
    "network_saturation.csv": ("min_bandwidth_gbps", "max_training_nodes_per_checkpoint_node"),
    "quotas.csv": ("family", "ondemand_vcpus", "spot_vcpus"),
}


def _rows(path: Path) -> list[dict[str, str]]:
    from gpuwise.user_files import read_text

    if not path.is_file():
        raise InputError("--data", str(path.parent),
                         f"the directory must hold {', '.join(FILES)} (missing {path.name})")
    reader = csv.DictReader(read_text(path, f"--data {path.name}", "CSV file").splitlines())
    missing = [c for c in COLUMNS[path.name] if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(str(path), ",".join(reader.fieldnames or []) or "(empty)",
                         f"missing column(s) {', '.join(missing)}")
    return list(reader)


def _num(row: dict[str, str], key: str, path: Path) -> float:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path.name}:{key}", row.get(key), "must be a number") from None


def load_deepvm(directory: str | Path | None = None) -> DeepVMData:
    """Read the four DeepVM CSVs from `directory` (default: the bundled AWS tables)."""
    d = Path(directory) if directory is not None else data_path("deepvm")
    if not d.is_dir():
        raise InputError("--data", str(d), "give a directory holding " + ", ".join(FILES))
    p = d / "instances.csv"
    instances = []
    for r in _rows(p):
        is_gpu = r.get("family", "").strip() == "G"
        instances.append(Instance(
            name=r["name"].strip(), family=r["family"].strip(), gpu=(r.get("gpu") or None),
            ondemand_price=_num(r, "ondemand_price", p), spot_price=_num(r, "spot_price", p),
            vcpus=int(_num(r, "vcpus", p)), memory_gb=_num(r, "memory_gb", p),
            network_gbps=_num(r, "network_gbps", p),
            eflops=_num(r, "eflops_score", p) if is_gpu else None))
    p = d / "scaling_factor_params.csv"
    scaling = {r["instance"].strip(): ScalingParams(_num(r, "a", p), _num(r, "b", p), _num(r, "c", p))
               for r in _rows(p)}
    p = d / "network_saturation.csv"
    sat = sorted((_num(r, "min_bandwidth_gbps", p), int(_num(r, "max_training_nodes_per_checkpoint_node", p)))
                 for r in _rows(p))
    p = d / "quotas.csv"
    quotas = {r["family"].strip(): (int(_num(r, "ondemand_vcpus", p)), int(_num(r, "spot_vcpus", p)))
              for r in _rows(p)}
    for inst in instances:
        if inst.is_gpu and inst.name not in scaling:
            raise InputError("scaling_factor_params.csv", inst.name,
                             "add a row with the logistic fit (a, b, c) for every GPU instance")
    if not sat:
        raise InputError("network_saturation.csv", str(d), "needs at least one bandwidth row")
    return DeepVMData(tuple(instances), scaling, tuple(sat), quotas, str(d))
