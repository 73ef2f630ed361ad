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

An **unbounded** (pay-per-use) cluster is one more kind of cluster (issue 5: "an unbounded,
pay-per-use cloud is one kind of cluster")::

    name: cloud-a100
    unbounded: true               # GPUs created on demand; nothing queues for capacity
    nodes:
      - gpu: A100                 # each listed type can be rented ...
        gpus_per_node: 8          # ... in machines of this many GPUs (no count: there is no limit)

Its nodes are templates, one per type; the simulator adds machines as allocations need them and
a machine's idle GPUs cost nothing, so the cost of a run is the GPU-seconds allocated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from gpuwise.errors import InputError


def canonical_gpu(name: str, field_name: str = "gpu") -> str:
    """Canonical GPU type name (gpuwise/data/gpus.csv); unknown -> InputError with the closest names."""
    from gpuwise.hardware.gpus import get_gpu

    return get_gpu(str(name), field_name).name


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
    """A fixed cluster of (possibly heterogeneous) nodes, or an unbounded pay-per-use one."""

    name: str
    nodes: tuple[Node, ...]                       # the machines (unbounded: one template per GPU type)
    inter_node_gbps: float | None = None          # network between nodes (None: unknown)
    intra_node: dict[str, str] = field(default_factory=dict)  # gpu type -> link label
    unbounded: bool = False                       # GPUs created on demand, billed per GPU-second used

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @cached_property   # asked many times per scheduling round; the nodes never change
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
        if self.unbounded:
            return "unbounded: " + " + ".join(f"{n.gpu} on demand ({n.gpus} per machine)" for n in self.nodes)
        groups: dict[tuple[str, int], int] = {}
        for n in self.nodes:
            groups[(n.gpu, n.gpus)] = groups.get((n.gpu, n.gpus), 0) + 1
        return " + ".join(f"{c}x{g} {t}" for (t, g), c in groups.items())


def surviving(spec: ClusterSpec, lost: Iterable[int]) -> ClusterSpec:
    """``spec`` without the nodes (indices) whose machines died: what a new job can still be placed on.
    The node list is renumbered, so use it for sizes and types, never for placements."""
    gone = set(lost)
    if not gone:
        return spec
    names = ", ".join(spec.nodes[i].node_id for i in sorted(gone))
    return ClusterSpec(name=f"{spec.name} (without lost {names})",
                       nodes=tuple(n for i, n in enumerate(spec.nodes) if i not in gone),
                       inter_node_gbps=spec.inter_node_gbps, intra_node=dict(spec.intra_node))


def unbounded_cluster(types: list[tuple[str, int]], name: str = "cloud",
                      inter_node_gbps: float | None = None) -> ClusterSpec:
    """Unbounded pay-per-use cluster from ``[(gpu type, gpus per machine), ...]`` (canonical types)."""
    if len({t for t, _ in types}) != len(types):
        raise InputError("nodes", [t for t, _ in types], "list each GPU type once in an unbounded cluster")
    spec = make_cluster([(t, 1, gpn) for t, gpn in types], name=name, inter_node_gbps=inter_node_gbps)
    return ClusterSpec(spec.name, spec.nodes, spec.inter_node_gbps, unbounded=True)


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


@lru_cache(maxsize=1)
def _file_models():
    """The pydantic models of a cluster file (built on first use: simulations without --cluster skip it)."""
    from typing import Optional

    from pydantic import Field, field_validator

    from gpuwise.user_files import strict_base, whole_number

    _Strict = strict_base()   # unknown keys are typos; NaN/inf are never a bandwidth or a count

    class NodeGroup(_Strict):
        gpu: str = Field(description="GPU type (a name known to gpuwise.hardware.gpus)")
        count: Optional[int] = Field(None, ge=1, description="how many such nodes (none in an unbounded cluster)")
        gpus_per_node: int = Field(ge=1, description="GPUs per node")
        intra_node: Optional[str] = Field(None, description="GPU-GPU link inside the node (label only)")

        _whole = field_validator("count", "gpus_per_node", mode="before")(lambda v: whole_number(v))

    class ClusterFile(_Strict):
        name: Optional[str] = Field(None, description="label shown in output")
        description: Optional[str] = None
        unbounded: bool = Field(False, description="GPUs created on demand (pay-per-use)")
        inter_node_gbps: Optional[float] = Field(None, gt=0, description="network between nodes, Gbit/s")
        nodes: list[NodeGroup] = Field(min_length=1, description="groups of identical nodes")

        @field_validator("unbounded", mode="before")
        @classmethod
        def _bool(cls, v):
            if not isinstance(v, bool):   # YAML `yes`/1 would be coerced: a typo, not a choice
                raise ValueError("give true (GPUs on demand) or false")
            return v

    return ClusterFile


def cluster_from_dict(data: object, source: str = "cluster") -> ClusterSpec:
    """Validate a parsed YAML/JSON mapping into a ClusterSpec (errors name the field and suggest keys)."""
    from pydantic import ValidationError

    from gpuwise.errors import validation_error

    if not isinstance(data, dict):
        raise InputError(source, type(data).__name__, "the file must be a mapping with a 'nodes' list")
    model = _file_models()
    try:
        spec_file = model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, model, source) from None
    groups: list[tuple[str, int, int]] = []
    intra: dict[str, str] = {}
    for i, g in enumerate(spec_file.nodes):
        where = f"{source}: nodes[{i}]"
        gpu = canonical_gpu(g.gpu, f"{where}.gpu")
        if spec_file.unbounded and g.count is not None:
            raise InputError(f"{where}.count", g.count,
                             "an unbounded cluster has no node count; drop it (machines are created on demand)")
        groups.append((gpu, g.count or 1, g.gpus_per_node))
        if g.intra_node is not None:
            intra[gpu] = g.intra_node
    name = spec_file.name or Path(source).stem
    gbps = spec_file.inter_node_gbps
    spec = (unbounded_cluster([(t, gpn) for t, _, gpn in groups], name, gbps) if spec_file.unbounded
            else make_cluster(groups, name=name, inter_node_gbps=gbps))
    return ClusterSpec(spec.name, spec.nodes, spec.inter_node_gbps, intra, spec.unbounded)


def load_cluster(path: str | Path) -> ClusterSpec:
    """Read a cluster YAML file (missing, folder, binary and malformed files are InputErrors naming it)."""
    from gpuwise.user_files import load_yaml

    data = load_yaml(path, "--cluster", "cluster YAML (see examples/clusters/)")
    return cluster_from_dict(data, str(path))


def pollux_cluster() -> ClusterSpec:
    """The Pollux paper's testbed: 16 nodes x 4 NVIDIA T4 (AWS g4dn.12xlarge, 50 Gbit/s)."""
    return make_cluster([(canonical_gpu("T4"), 16, 4)], name="pollux-16x4-t4", inter_node_gbps=50.0)
