"""Communication time of data, tensor and pipeline parallelism (bandwidth-latency model).

Ring collectives over n ranks move 2(n-1)/n x bytes per rank for an all-reduce and (n-1)/n x bytes
for a reduce-scatter or an all-gather (Patarasuk & Yuan 2009; NCCL's ring algorithm). Time =
volume / (bandwidth x efficiency) + 2(n-1) x latency. Across nodes a hierarchical all-reduce is
bounded by each node's NIC carrying the whole node's share once: 2(N-1)/N x bytes / NIC bandwidth.
"""

from __future__ import annotations

LINK_EFFICIENCY = 0.7        # achieved / nominal bus bandwidth (Calculon systems files use 0.65-0.9)
HOP_LATENCY_S = 10e-6        # per ring step (NCCL ~5-20 us intra-node)
NET_LATENCY_S = 20e-6        # per ring step across nodes


def ring_allreduce_s(nbytes: float, ranks: int, gbps: float, latency: float = HOP_LATENCY_S) -> float:
    """All-reduce of ``nbytes`` over ``ranks`` GPUs on links of ``gbps`` GB/s (unidirectional per GPU)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * nbytes / (gbps * 1e9 * LINK_EFFICIENCY) + 2 * (ranks - 1) * latency


def ring_gather_s(nbytes: float, ranks: int, gbps: float, latency: float = HOP_LATENCY_S) -> float:
    """Reduce-scatter or all-gather of a ``nbytes`` buffer (each rank ends with / starts from 1/ranks)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * nbytes / (gbps * 1e9 * LINK_EFFICIENCY) + (ranks - 1) * latency


def dp_sync_s(grad_bytes: float, dp: int, dp_per_node: int, intra_gbps: float, inter_node_gbps: float,
              zero: int = 0) -> float:
    """Gradient synchronisation per optimizer step for ``dp`` replicas, ``dp_per_node`` of them per node.

    ZeRO-1/2 = reduce-scatter of gradients + all-gather of updated parameters (same volume as an
    all-reduce); ZeRO-3/FSDP adds a parameter all-gather for the backward pass (1.5x the volume).
    ``inter_node_gbps`` is the node's NIC bandwidth (GB/s) shared by its GPUs.
    """
    if dp <= 1:
        return 0.0
    factor = 1.5 if zero >= 3 else 1.0
    local = max(1, min(dp_per_node, dp))
    nodes = -(-dp // local)
    t = ring_allreduce_s(grad_bytes, local, intra_gbps)
    if nodes > 1:
        t += ring_allreduce_s(grad_bytes, nodes, inter_node_gbps, NET_LATENCY_S)
    return factor * t


def pipeline_bubble_fraction(pp: int, micro_batches: int, interleave: int = 1) -> float:
    """Idle fraction of a 1F1B pipeline step: (pp-1) / (v*m + pp-1) (Narayanan et al. 2021; v = interleaving)."""
    if pp <= 1:
        return 0.0
    return (pp - 1) / (interleave * micro_batches + pp - 1)
