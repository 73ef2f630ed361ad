"""Cluster specification: groups of identical nodes (GPU type, GPUs per node) and the network.

YAML format (see examples/clusters/*.yaml)::

    name: pollux-16x4-t4          # label shown in output
    inter_node_gbps: 50           # optional: network bandwidth between nodes, Gbit/s
    nodes:
      - gpu: T4                   # GPU type (a name known to gpuwise.hardware.gpus)
        count: 16                 # how many such nodes
        gpus_per_node: 4
        intra_node: PCIe3         # optional: GPU-GPU link inside the node (label only)

Nodes are numbered in file order; node ids are ``<gpu>-<index>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from gpuwise.errors import InputError

def canonical_gpu(name: str, field_name: str = "gpu") -> str:
    """Canonical GPU type name (gpuwise/data/gpus.csv); unknown -> InputError with the closest names."""
    from gpuwise.errors import unknown_name
    from gpuwise.hardware.gpus import known_names, resolve_gpu_name

    resolved = resolve_gpu_name(str(name))
    if resolved is None:
        raise unknown_name(field_name, str(name), known_names())
    return resolved


@lru_cache(maxsize=None)
def relative_speed(gpu: str, reference: str = "T4") -> tuple[float, float]:
    """(compute speed, memory) of ``gpu`` relative to ``reference`` from gpus.csv.

    Speed = geometric mean of the dense fp16 tensor peak ratio and the HBM bandwidth ratio: DL
    training kernels are partly compute-, partly bandwidth-bound. An assumption (the Pollux
    profiles are T4-only); used to carry T4 measurements to other GPU types."""
    from gpuwise.hardware.gpus import get_gpu

    ref, spec = get_gpu(reference), get_gpu(gpu)
    peak = (spec.fp16_tflops or spec.fp32_tflops) / (ref.fp16_tflops or ref.fp32_tflops)
    return math.sqrt(peak * spec.hbm_gbps / ref.hbm_gbps), spec.memory_gib / ref.memory_gib


@dataclass(frozen=True)
class Node:
    """One machine: ``gpus`` GPUs of type ``gpu``."""

    node_id: str
    gpu: str        # canonical GPU type
    gpus: int       # GPUs in this node


@dataclass(frozen=True)
class ClusterSpec:
    """A fixed cluster of (possibly heterogeneous) nodes."""

    name: str
    nodes: tuple[Node, ...]
    inter_node_gbps: float | None = None          # network between nodes (None: unknown)
    intra_node: dict[str, str] = field(default_factory=dict)  # gpu type -> link label

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for n in self.nodes:
            seen.setdefault(n.gpu)
        return tuple(seen)

    def gpus_of_type(self, gpu: str) -> int:
        return sum(n.gpus for n in self.nodes if n.gpu == gpu)

    def max_gpus_per_node(self, gpu: str) -> int:
        return max((n.gpus for n in self.nodes if n.gpu == gpu), default=0)

    def describe(self) -> str:
        groups: dict[tuple[str, int], int] = {}
        for n in self.nodes:
            groups[(n.gpu, n.gpus)] = groups.get((n.gpu, n.gpus), 0) + 1
        return " + ".join(f"{c}x{g} {t}" for (t, g), c in groups.items())


def make_cluster(groups: list[tuple[str, int, int]], name: str = "cluster",
                 inter_node_gbps: float | None = None) -> ClusterSpec:
    """Cluster from ``[(gpu type, node count, gpus per node), ...]`` (types must be canonical)."""
    nodes: list[Node] = []
    per_type: dict[str, int] = {}
    for gpu, count, gpn in groups:
        for _ in range(count):
            i = per_type.get(gpu, 0)
            per_type[gpu] = i + 1
            nodes.append(Node(f"{gpu}-{i}", gpu, int(gpn)))
    return ClusterSpec(name=name, nodes=tuple(nodes), inter_node_gbps=inter_node_gbps)


def _positive_int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise InputError(where, value, "give a positive whole number")
    return int(value)


def cluster_from_dict(data: object, source: str = "cluster") -> ClusterSpec:
    """Validate a parsed YAML/JSON mapping into a ClusterSpec (errors name the field)."""
    if not isinstance(data, dict):
        raise InputError(source, type(data).__name__, "the file must be a mapping with a 'nodes' list")
    unknown = set(data) - {"name", "nodes", "inter_node_gbps", "description"}
    if unknown:
        raise InputError(f"{source}: key", sorted(unknown)[0],
                         "valid keys: name, nodes, inter_node_gbps, description")
    groups_raw = data.get("nodes")
    if not isinstance(groups_raw, list) or not groups_raw:
        raise InputError(f"{source}: nodes", groups_raw, "give a non-empty list of {gpu, count, gpus_per_node}")
    groups: list[tuple[str, int, int]] = []
    intra: dict[str, str] = {}
    for i, g in enumerate(groups_raw):
        where = f"{source}: nodes[{i}]"
        if not isinstance(g, dict) or "gpu" not in g or "gpus_per_node" not in g:
            raise InputError(where, g, "each entry needs gpu, gpus_per_node (and optional count, intra_node)")
        extra = set(g) - {"gpu", "count", "gpus_per_node", "intra_node"}
        if extra:
            raise InputError(f"{where}.{sorted(extra)[0]}", g[sorted(extra)[0]],
                             "valid keys: gpu, count, gpus_per_node, intra_node")
        gpu = canonical_gpu(g["gpu"], f"{where}.gpu")
        groups.append((gpu, _positive_int(g.get("count", 1), f"{where}.count"),
                       _positive_int(g["gpus_per_node"], f"{where}.gpus_per_node")))
        if "intra_node" in g:
            intra[gpu] = str(g["intra_node"])
    bw = data.get("inter_node_gbps")
    if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float)) or bw <= 0):
        raise InputError(f"{source}: inter_node_gbps", bw, "give a positive number (Gbit/s)")
    spec = make_cluster(groups, name=str(data.get("name", Path(source).stem)),
                        inter_node_gbps=None if bw is None else float(bw))
    return ClusterSpec(spec.name, spec.nodes, spec.inter_node_gbps, intra)


def load_cluster(path: str | Path) -> ClusterSpec:
    """Read a cluster YAML file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise InputError("--cluster", str(path), "give the path of a cluster YAML (see examples/clusters/)")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise InputError(str(p), "YAML", f"fix the syntax: {str(exc).splitlines()[0]}") from None
    return cluster_from_dict(data, str(p))


def pollux_cluster() -> ClusterSpec:
    """The Pollux paper's testbed: 16 nodes x 4 NVIDIA T4 (AWS g4dn.12xlarge, 50 Gbit/s)."""
    return make_cluster([(canonical_gpu("T4"), 16, 4)], name="pollux-16x4-t4", inter_node_gbps=50.0)
