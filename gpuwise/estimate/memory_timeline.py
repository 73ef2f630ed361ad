"""When memory peaks inside one training step: the phases of a step and what is alive in each.

A stage's peak is the largest of three moments (PyTorch's order of allocation and freeing):
- loss boundary: the end of the forward of the last in-flight micro-batch and the start of its
  backward. Every saved activation is alive, the last stage holds the float32 log-softmax and the
  two float32 gradients the loss backward creates, FSDP2 holds the unsharded output group (the root
  is not resharded after forward) and the first block prefetched for backward, autocast holds its
  cached 16-bit weight casts.
- block backward: the first block's backward with (almost) every activation still alive, the
  recomputed block (full / layer-K / op AC), the gradients flowing through the block, FSDP2's
  current and prefetched unsharded block, the root group (gathered until the end of backward)
  and the block's unsharded gradient plus its reduce-scatter input in the reduction dtype.
- last block backward (one micro-batch in flight, no accumulation; or FSDP1 under CPU offload, whose
  gradient shards stay on the GPU until the backward ends whatever the accumulation): the stage's last
  block to run its backward, with every other block's gradient written (sharded under FSDP) and one
  block's activations left; with little activation memory (full recompute) this is the block-backward peak.
- optimizer step: parameters, all gradients, optimizer states and the step's temporaries
  (PyTorch's default foreach AdamW makes one fp32 copy of the moments for sqrt(v)).
- embedding backward: the end of backward, when the embedding's gradient is computed with every
  block's gradient written. FSDP2: the root group is still gathered, the output layer's unsharded
  gradient is alive since the loss's backward, with tied embeddings the two contributions and
  their sum (autograd adds them out of place), and the last block's reduce-scatter input (FSDP2
  keeps one in flight until the next group reduces). Without FSDP, only for a tied output layer:
  its gradient, the embedding's and their sum.
- output-layer backward (a trainable output layer applied once per loss chunk, torchtune's chunked output;
  not under FSDP): every block's checkpoint or activations and the final norm's tensors are alive, the loss's
  backward has made every chunk's logits gradient, and autograd sums the per-chunk weight gradients out of place.
- root reduce-scatter (FSDP without pipeline parallelism, full fine-tunes): the end of backward, when the
  root group (embedding, final norm, output layer: large for big vocabularies) reduces its gradients:
  every other gradient is already sharded (under FSDP1 CPU offload still on the GPU: held_grads), the
  root's are unsharded in the compute dtype and copied into a reduce-scatter input in the reduction
  dtype (traced: gpuwise.trace).
Gradients from earlier micro-batches are alive in the first two moments when a step has more
than one micro-batch (gradient accumulation; a pipeline with several micro-batches interleaves
forwards with earlier backwards). Under pipeline parallelism FSDP2 keeps the stage unsharded
(reshard_after_forward=False) and accumulates unsharded gradients in the reduction dtype until the
last micro-batch (torch.distributed.pipelining disables gradient sync for the others).

Pipeline schedules: 1F1B and zero-bubble (ZB-H1, same activation memory as 1F1B) keep
min(pp - i, m) micro-batches in flight on stage i; GPipe keeps all m; interleaved 1F1B with V
chunks per stage keeps ((V-1) pp + 2 (pp-1-i) + 1) chunk-micro-batches of 1/V of the stage
(stage 0: pp + (pp-1)/V micro-batches, Korthikanti et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("loss boundary", "block backward", "last block backward", "optimizer step", "embedding backward",
          "root reduce-scatter", "output-layer backward")


@dataclass(slots=True)   # not frozen: a plan builds ~10^4 of these, and a frozen __init__ is 4x slower
class StageLoad:
    """Per-GPU bytes of one pipeline stage, each alive in the phases the module docstring says."""

    weights: float            # stored weights (sharded under ZeRO-3)
    grads: float              # gradients after the step's last backward (sharded as ZeRO says)
    optimizer: float
    accumulating: bool        # gradients of earlier micro-batches alive during forward/backward
    stage_compute: float      # compute copies held all step (FSDP2 under PP: the unsharded stage)
    acc_grads: float          # FSDP2 under PP: unsharded gradient accumulators (reduce dtype)
    block_compute: float      # FSDP2: one block's gathered compute copy
    block_grad_temp: float    # one block's unsharded gradient (+ reduce-scatter input)
    head_compute: float       # FSDP2: gathered output group at the loss boundary
    opt_temp: float           # optimizer-step temporaries
    stack: float              # activations this stage keeps for one micro-batch
    in_flight: float          # micro-batches in flight at the peak
    work: float               # a recomputed block's working set (0 without recompute)
    bwd_temp: float           # gradient tensors inside one block's backward
    emb: float                # embedding activations of one micro-batch (first stage)
    head_keep: float          # final norm + loss tensors kept (last stage)
    loss_temp: float          # loss-backward gradients (last stage)
    late_grads: float = 0.0   # gradients already written when the stage's last block runs its backward
    #                           (all but the root group's and that block's; 0: no such phase)
    layer_stack: float = 0.0  # activations one block keeps for one micro-batch
    block_cast: float = 0.0   # autocast's weight casts of one block (the others' are freed by then)
    casts: float = 0.0        # autocast's 16-bit weight casts, kept by each in-flight micro-batch
    head_grad: float = 0.0    # FSDP2: the output layer's unsharded gradient (compute dtype), written by the loss's
    #                           backward and kept until the root group reduces it at the end of backward
    embed_grads: float = 0.0  # every block's gradient (sharded as ZeRO says), when the embedding runs its backward
    embed_temp: float = 0.0   # what the embedding's backward holds besides (0: no such phase; see the docstring)
    head_bwd_keep: float = 0.0    # a per-chunk output layer's backward (chunked_head_backward_bytes): the final
    head_bwd: float = 0.0         # norm's kept tensors; the waiting logits gradients and three weight-sized ones
    held_grads: float = 0.0   # FSDP1 CPU offload: every block's gradient shard, on the GPU until the backward ends
    #                           (the step reads the host copies), at the root group's reduction
    root_grad_temp: float = 0.0   # FSDP2: the root group's (embedding, final norm, output layer) gradient
    #                               reduction at the end of backward: its unsharded gradients in the compute
    #                               dtype plus the reduce-scatter input in the reduction dtype, less the shard
    #                               it has not written yet


# StageLoad's fields in order -> position: a search builds ~12,000 loads, positionally (`StageLoad(*values)`,
# about 3x faster than by keyword); `stage_values` lays out the fields it knows, the caller fills the rest
FIELD_INDEX = {name: i for i, name in enumerate(StageLoad.__dataclass_fields__)}


def stage_values(known: dict[str, float]) -> list:
    """A list of StageLoad's field values in order: ``known``'s, None for the others (to be filled by index)."""
    return [known.get(name) for name in FIELD_INDEX]


def in_flight(schedule: str, pp: int, stage: int, micro_batches: int) -> float:
    """Micro-batches whose activations stage `stage` holds at its peak (see module docstring)."""
    if pp <= 1:
        return 1.0
    m = max(1, micro_batches)
    if schedule == "gpipe":
        return float(m)
    if schedule.startswith("interleaved-"):
        v = int(schedule.split("-", 1)[1])
        return float(min(m, ((v - 1) * pp + 2 * (pp - 1 - stage) + 1) / v))
    return float(min(pp - stage, m))


_PARTS = ("parameters", "optimizer", "gradients", "activations", "temporaries")


def _phase_parts(s: StageLoad) -> list[tuple[str, tuple[float, float, float, float, float]]]:
    """(phase, bytes of _PARTS) for each moment of a step that the stage has (see module docstring)."""
    early_grads = (s.grads if s.accumulating and not s.acc_grads else 0.0) + s.acc_grads
    kept = s.in_flight * (s.stack + s.emb)
    w, o = s.weights, s.optimizer
    out = [
        ("loss boundary", (w, o, early_grads, kept + s.head_keep,
                           s.stage_compute + s.in_flight * s.casts + s.head_compute + s.block_compute + s.loss_temp)),
        ("block backward", (w, o, early_grads, kept + s.work,
                            s.stage_compute + s.in_flight * s.casts + s.head_compute + 2 * s.block_compute
                            + s.block_grad_temp + s.bwd_temp + s.head_grad)),
        ("optimizer step", (w, o, s.grads, 0.0, s.opt_temp)),
    ]
    if s.late_grads:
        out.append(("last block backward", (w, o, s.late_grads, s.emb + s.layer_stack + s.work,
                                            s.block_cast + s.head_compute + 2 * s.block_compute
                                            + s.block_grad_temp + s.bwd_temp + s.head_grad)))
    if s.embed_temp:
        out.append(("embedding backward", (w, o, s.embed_grads, 0.0, s.embed_temp)))
    if s.head_bwd:
        out.append(("output-layer backward", (w, o, early_grads, kept + s.head_bwd_keep,
                                              s.stage_compute + s.in_flight * s.casts + s.head_bwd)))
    if s.root_grad_temp:
        out.append(("root reduce-scatter", (w, o, s.grads + s.held_grads, 0.0, s.root_grad_temp)))
    return out


def peak(s: StageLoad) -> tuple[float, str, dict[str, float]]:
    """(allocated bytes, phase, parts) at the stage's peak (the first phase of the largest sum)."""
    best, name, parts = peak_values(s)
    return best, name, dict(zip(_PARTS, parts))


def peak_values(s: StageLoad) -> tuple[float, str, tuple[float, float, float, float, float]]:
    """`peak` with the parts as a tuple in _PARTS order (parameters, optimizer, gradients, activations,
    temporaries): the memory estimate compares every stage's peak and keeps one stage's parts."""
    best, name, parts = None, "", ()
    for n, ps in _phase_parts(s):
        total = sum(ps)      # summed in _PARTS order, as the phase's parts are
        if best is None or total > best:
            best, name, parts = total, n, ps
    return best, name, parts
