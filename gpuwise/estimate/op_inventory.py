"""Operator inventory of one transformer training micro-step, as a compact table per model.

Each row is one operator (a GEMM, the attention core, a norm, an elementwise op, the loss, ...) of
one of three scopes: ``layer`` (once per transformer layer), ``head`` (embedding, final norm, LM head
and loss: once per model, on the first/last pipeline stage) and ``optimizer`` (per locally owned
parameter). Its forward FLOPs and HBM bytes are linear in a few per-GPU quantities so that the whole
table evaluates with numpy for any (micro-batch, sequence, tp, cp, sp) at once:

    FLOPs = t * (f_tok + f_ctx * ctx) / split
    bytes = t * (b_tok + b_ctx * ctx) / split + b_w / w_split

with t = micro_batch * seq_len / cp tokens on this GPU, ctx = keys each query attends to (causal:
(seq_len + 128) / 2, the tiles a flash kernel computes, ``attended_keys``), ``split`` = tp for tensor-parallel ops (and for sequence-parallel elementwise ops when
SP is on), ``b_w`` = weight bytes read once per micro-step (divided by tp). Backward rows are the
forward rows times per-class factors (GEMMs: dgrad + wgrad = 2x; attention: FlashAttention's backward
recomputes the scores, 2.5x FLOPs; elementwise: read the saved input and the incoming gradient and
write one gradient, 2x bytes). Recompute re-runs forward rows of the blocks by the policy's name
(``workload.training.recompute_policy``, the policy object the memory model and ``flops.py`` parse):
full = every block's forward (not the embedding, LM head and loss, which torch.utils.checkpoint and
Megatron leave outside the checkpointed blocks; ``flops.py`` keeps Megatron's "a whole forward"
convention for hardware FLOPs); layer-K = that of every K-th block; selective = the
attention core; op (torchtitan op-level SAC) = every second weight matmul (the share
``activations.op_sac_recomputed_fraction`` gives) and every elementwise op of the block (only matmul
and attention outputs are saved), not the attention core. Kernel counts are per row (fused Megatron/TE-style kernels; backward 2 per GEMM).

FLOPs here are what the kernels execute (causal attention computes half the score matrix), not the
6N + 12LHQT "model FLOPs" of MFU (``flops.py``), and the test suite checks them against PyTorch's
FlopCounterMode on real modules where torch is installed. The analytic path never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from gpuwise.workload.model_spec import ModelSpec

OP_CLASSES = ("gemm", "attention", "memory")
GEMM, ATTN, MEM = 0, 1, 2
# backward / forward ratios per class: (FLOPs, bytes, kernels)
BACKWARD = {GEMM: (2.0, 2.0, 2.0), ATTN: (2.5, 2.0, 1.0), MEM: (2.0, 2.0, 1.0)}
ENCODER_FAMILIES = ("bert", "roberta")


@dataclass(frozen=True)
class OpTable:
    """Forward rows of one model's micro-step (see module docstring); arrays are aligned."""

    names: tuple[str, ...]
    cls: np.ndarray          # OP_CLASSES index
    scope: np.ndarray        # 0 layer, 1 head
    f_tok: np.ndarray        # FLOPs per token (before split)
    f_ctx: np.ndarray        # FLOPs per token per attended key
    b_tok: np.ndarray        # bytes per token per value byte (multiplied by the activation dtype size)
    b_ctx: np.ndarray        # bytes per token per attended key per value byte
    w_params: np.ndarray     # weight parameters read by the op (bytes = params x weight dtype size)
    tp_split: np.ndarray     # 1 = divided by tp always (tensor-parallel GEMMs, attention heads)
    sp_split: np.ndarray     # 1 = divided by tp when sequence parallelism is on (norms, residual adds)
    kernels: np.ndarray      # kernels launched (forward)
    gemm_width: np.ndarray   # smallest GEMM dimension before tp split (size-dependent efficiency)
    causal: bool
    n_layers: int            # decoder (+ encoder) layers
    heads: int               # query heads (unfused attention materialises heads x s x s scores)
    op_sac_share: float      # share of a block's GEMM FLOPs that op-level SAC recomputes

    def __len__(self) -> int:
        return len(self.names)


def _rows(spec: ModelSpec) -> list[tuple]:
    """(name, class, scope, f_tok, f_ctx, b_tok, b_ctx, w_params, tp_split, sp_split, kernels, width)."""
    h, hd = spec.hidden, spec.head_dim or spec.hidden // max(spec.n_heads, 1)
    q, kv = spec.n_heads * hd, spec.n_kv_heads * hd
    ffn = spec.ffn_hidden * spec.experts_per_token          # MoE: routed experts per token
    up = ffn * (2 if spec.gated_mlp else 1)
    V = spec.vocab_size
    rope = spec.positions == "rotary"      # learned tables are an embedding; ALiBi lives in the attention kernel
    qkv = q + 2 * kv
    rows = [
        # attention block
        ("norm_attn", MEM, 0, 5 * h, 0, 2 * h, 0, 0, 0, 1, 1, 0),
        ("qkv_proj", GEMM, 0, 2 * h * qkv, 0, h + qkv, 0, h * qkv, 1, 0, 1, min(h, qkv)),
        ("attention_core", ATTN, 0, 0, 4 * q, 2 * q + 2 * kv, 0, 0, 1, 0, 1, hd),
        ("out_proj", GEMM, 0, 2 * q * h, 0, q + h, 0, q * h, 1, 0, 1, min(q, h)),
        ("residual_attn", MEM, 0, h, 0, 3 * h, 0, 0, 0, 1, 1, 0),
        # MLP block
        ("norm_mlp", MEM, 0, 5 * h, 0, 2 * h, 0, 0, 0, 1, 1, 0),
        ("mlp_up", GEMM, 0, 2 * h * up, 0, h + up, 0, h * up, 1, 0, 1, min(h, ffn)),
        ("mlp_act", MEM, 0, 4 * ffn, 0, up + ffn, 0, 0, 1, 0, 1, 0),
        ("mlp_down", GEMM, 0, 2 * ffn * h, 0, ffn + h, 0, ffn * h, 1, 0, 1, min(ffn, h)),
        ("residual_mlp", MEM, 0, h, 0, 3 * h, 0, 0, 0, 1, 1, 0),
    ]
    if spec.post_norms:      # Gemma 2: an RMSNorm on each branch's output, before its residual add
        rows.insert(rows.index(next(r for r in rows if r[0] == "residual_attn")),
                    ("post_norm_attn", MEM, 0, 5 * h, 0, 2 * h, 0, 0, 0, 1, 1, 0))
        rows.insert(len(rows) - 1, ("post_norm_mlp", MEM, 0, 5 * h, 0, 2 * h, 0, 0, 0, 1, 1, 0))
    if rope:
        rows.insert(2, ("rotary", MEM, 0, 3 * (q + kv), 0, 2 * (q + kv), 0, 0, 1, 0, 1, 0))
    if spec.n_experts > 1:
        rows.insert(-4, ("router", GEMM, 0, 2 * h * spec.n_experts, 0, h + spec.n_experts, 0,
                         h * spec.n_experts, 0, 0, 3, min(h, spec.n_experts)))
    head = [
        ("embedding", MEM, 1, 0, 0, 2 * h, 0, 0, 0, 1, 1, 0),
        ("final_norm", MEM, 1, 5 * h, 0, 2 * h, 0, 0, 0, 1, 1, 0),
        ("lm_head", GEMM, 1, 2 * h * V, 0, h + V, 0, h * V, 1, 0, 1, min(h, V)),
        # Gemma 2's final soft-capping, cap * tanh(logits / cap): three elementwise passes over the logits
        *([("logit_softcap", MEM, 1, 3 * V, 0, 6 * V, 0, 0, 1, 0, 3, 0)] if spec.final_softcap else []),
        # cross-entropy over fp32-upcast logits: read logits, write/read fp32 softmax, write grad (per value byte = 2)
        ("loss", MEM, 1, 5 * V, 0, 4 * V, 0, 0, 1, 0, 3, 0),
    ]
    return rows + head


@lru_cache(maxsize=256)
def op_table(spec: ModelSpec) -> OpTable:
    """The operator inventory of a transformer ``spec`` (cached: one table per model)."""
    rows = _rows(spec)
    col = list(zip(*rows))
    arr = [np.asarray(c, float) for c in col[1:]]
    layers = spec.n_layers + spec.n_encoder_layers
    from gpuwise.estimate.activations import op_sac_recomputed_fraction

    return OpTable(tuple(col[0]), arr[0].astype(int), arr[1].astype(int), arr[2], arr[3], arr[4], arr[5], arr[6],
                   arr[7], arr[8], arr[9], arr[10], spec.family not in ENCODER_FAMILIES, layers,
                   spec.n_heads, op_sac_recomputed_fraction(spec))


def reforwarded_blocks(n_layers: int, recompute: str) -> float:
    """Share of the blocks whose whole forward (tensor-parallel collectives included) runs again in backward."""
    from gpuwise.workload.training import recompute_policy

    pol = recompute_policy(recompute)
    if pol.kind == "full":
        return 1.0
    return (n_layers // pol.every) / max(n_layers, 1) if pol.kind == "layer" else 0.0


def recomputed_share(tab: OpTable, recompute: str) -> np.ndarray:
    """Per row: the share of its forward work re-run in backward under the recompute policy ``recompute``
    (module docstring)."""
    from gpuwise.workload.training import recompute_policy

    pol = recompute_policy(recompute)
    block = (tab.scope == 0).astype(float)
    if pol.kind in ("full", "layer"):
        return block * reforwarded_blocks(tab.n_layers, recompute)
    if pol.kind == "selective":
        return (tab.cls == ATTN).astype(float)
    if pol.kind == "op":
        return block * np.where(tab.cls == GEMM, tab.op_sac_share, np.where(tab.cls == MEM, 1.0, 0.0))
    return np.zeros(len(tab))


CAUSAL_TILE = 128   # key/query tile of flash-attention kernels (FlashAttention-2/3, cuDNN: 64-128; 128 at head dim 128)


def attended_keys(seq_len: float, causal: bool) -> float:
    """Keys per query whose scores the attention kernel computes: all of them without a mask; with a causal mask a
    tiled kernel skips the tiles above the diagonal but computes the diagonal tiles whole, n(n+1)/2 of n^2 tiles
    (n = seq_len / CAUSAL_TILE): (seq_len + tile) / 2 -- half at long sequences, more at short ones."""
    if not causal:
        return float(seq_len)
    return min(float(seq_len), (seq_len + CAUSAL_TILE) / 2.0)


@dataclass(frozen=True)
class MicroStepWork:
    """FLOPs, bytes and kernels of one micro-step on one GPU, per row, split by phase."""

    flops: np.ndarray        # rows x phases (forward, backward, recompute)
    bytes: np.ndarray
    kernels: np.ndarray
    cls: np.ndarray
    gemm_width: np.ndarray   # per-GPU smallest GEMM dimension (0 for non-GEMM rows)
    layers: float            # layers on this GPU's pipeline stage
    head: float              # 1 if the stage carries the embedding + LM head rows


def micro_step_work(tab: OpTable, micro_batch: float, seq_len: float, tp: int = 1, cp: int = 1, sp: bool = False,
                    pp: int = 1, value_bytes: float = 2.0, recompute: str = "none", frozen_base: bool = False,
                    flash: bool = True, masked: bool = False) -> MicroStepWork:
    """Per-row work of one micro-step on one GPU of the busiest pipeline stage (the last: its layers
    plus the LM head and loss). ``frozen_base`` (LoRA/QLoRA): GEMMs skip their weight gradient. ``masked``: the
    attention gets an additive b x s x s mask (a padding mask): the kernel computes every key tile and reads the mask
    once per head (its backward, by the class's byte ratio, again)."""
    t = micro_batch * seq_len / cp
    ctx = attended_keys(seq_len, tab.causal and not masked)
    split = np.where(tab.tp_split > 0, tp, np.where((tab.sp_split > 0) & sp, tp, 1)).astype(float)
    fwd_f = t * (tab.f_tok + tab.f_ctx * ctx) / split
    fwd_b = (t * (tab.b_tok + tab.b_ctx * ctx) / split + tab.w_params / tp) * value_bytes
    kern = tab.kernels.copy()
    if masked:
        fwd_b = fwd_b + (tab.cls == ATTN) * t * tab.heads * seq_len * value_bytes / tp
    if not flash:
        # unfused attention materialises the b x heads x s x s scores: written, softmax read+written, read for AV
        att = (tab.cls == ATTN).astype(float)
        fwd_b = fwd_b + att * t * tab.heads * seq_len * 4 * value_bytes / tp
        kern = kern + att * 3
    bwd = np.array([BACKWARD[c] for c in tab.cls])
    gem = tab.cls == GEMM
    bf = bwd[:, 0] * fwd_f
    if frozen_base:
        bf = np.where(gem, fwd_f, bf)                    # only the input gradient
    bb, bk = bwd[:, 1] * fwd_b, bwd[:, 2] * kern
    share = recomputed_share(tab, recompute)
    # fractional shares (layer-K, op-level SAC) are averages over the stage's blocks and matmuls: launches too
    rf, rb, rk = fwd_f * share, fwd_b * share, kern * share
    width = np.where(gem, tab.gemm_width / np.where(tab.tp_split > 0, tp, 1), 0.0)
    return MicroStepWork(np.stack([fwd_f, bf, rf], 1), np.stack([fwd_b, bb, rb], 1), np.stack([kern, bk, rk], 1),
                         tab.cls, width, tab.n_layers / pp, 1.0)
