"""How a training stack's own model and quantisation code stores tensors (data/stacks/model_code.csv):
the NF4 weight layout, whether a frozen 4-bit linear keeps its input, whether norms keep a float32
copy of their input, whether grouped-query K/V are kept expanded, whether the output layer has its own
matrix. Stacks without a row use the `default` row (gpuwise's reference accounting)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path


@dataclass(frozen=True)
class ModelCode:
    stack: str
    nf4_bytes: float            # bytes per parameter of a 4-bit frozen linear weight (codes + block constants)
    nf4_output_layer: bool      # the output layer is quantised too
    nf4_keeps_input: bool       # a frozen 4-bit linear keeps its input for backward (bitsandbytes < 0.43.2)
    norm_fp32_input: bool       # norms keep a float32 copy of their input
    kv_expanded: bool           # GQA K and V kept at query-head width
    nf4_dequant_copies: int     # 16-bit copies of a 4-bit weight its matmul materialises (dequantise, cast)
    fsdp_unsharded_accum: bool  # FSDP gradient accumulation keeps unsharded gradients (FSDP1 no_sync)
    separate_lm_head: bool      # the output layer is its own matrix even for tied checkpoints
    kbit_fp32_rest: bool        # under a 4-bit base every other parameter is cast to float32 (PEFT
    #                             prepare_model_for_kbit_training): fp32 embeddings, norms and output layer
    source: str
    lora_mlp_fused: bool = False  # a fused LoRA MLP: keeps its input, gate and up only; one ffn-wide gradient in
    #                               backward (Unsloth LoRA_MLP)
    lora_dropout: bool = False    # each LoRA-adapted linear keeps its own dropout output and 1-byte mask (LitGPT)
    qkv_view: bool = False        # V views the fused QKV output (one or every query group): the whole output is kept
    attn_out_copy: bool = False   # the output projection reads its own copy of the attention output (LitGPT's reshape,
    #                               llm-foundry's flash-attn pad_input)
    lora_qkv_pad: bool = False    # LoRAQKVLinear.zero_pad keeps the adapted parts' adapter output (LitGPT)
    logits_fp32_held: bool = False  # the loop holds float32 logits through backward and the next forward (Fabric)
    loss_chunk_tokens: int = 0    # the chunked loss runs over chunks of this many tokens per sequence (0: LOSS_CHUNKS)
    chunk_logits_held: bool = False  # the model returns every chunk's 16-bit logits, held by the chunked loss's forward
    #                                  while it upcasts each chunk (torchtune chunked_output + CEWithChunkedOutputLoss)
    nf4_dequant_work: float = 0.0  # bytes per parameter one 4-bit matrix's dequantisation holds at once, counted for a
    #                                block's largest inside its backward (torchao eager get_original_weight: 14); 0: none
    norm_weight_fp32: bool = False  # the norm multiplies its float32 normalised input by its weight: a trainable weight
    #                                 keeps that float32 product (torchtune RMSNorm: F.rms_norm(x.float(), weight=...))
    lora_input_cast: bool = False  # under autocast each LoRA-adapted linear keeps its own 16-bit cast of its input
    #                                (PEFT x.to(lora_A.weight.dtype), float32 adapters): none shared between linears
    offload_grads_held: bool = False  # under FSDP CPU offload each unit's reduced gradient shard stays on the GPU
    #                                   until the backward ends (FSDP1 _saved_grad_shard); False: moved to the host


@lru_cache(maxsize=1)
def _rows() -> dict[str, ModelCode]:
    with open(data_path("stacks", "model_code.csv"), newline="", encoding="utf-8") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {r["stack"]: ModelCode(r["stack"], float(r["nf4_bytes"]), r["nf4_output_layer"] == "quantised",
                                      r["nf4_keeps_input"] == "yes", r["norm_fp32_input"] == "yes",
                                      r["kv_expanded"] == "yes", int(r["nf4_dequant_copies"]),
                                      r["fsdp_no_sync"] == "unsharded",
                                      r["separate_lm_head"] == "yes", r["kbit_fp32_rest"] == "yes", r["source"],
                                      r["lora_mlp"] == "fused", r["lora_dropout"] == "own", r["qkv_view"] == "yes",
                                      r["attn_out_copy"] == "yes", r["lora_qkv_pad"] == "kept",
                                      r["logits"] == "fp32-held",
                                      int(r["loss_chunk_tokens"]), r["chunk_logits"] == "held",
                                      float(r["nf4_dequant_work"]), r["norm_weight_fp32"] == "yes",
                                      r["lora_input_cast"] == "own", r["fsdp_offload_grads"] == "held")
                for r in rows}


def model_code(stack: str) -> ModelCode:
    """The stack's row, or the default row for stacks that match gpuwise's reference accounting."""
    rows = _rows()
    return rows.get(stack, rows["default"])


def describe(stack: str) -> str:
    """One assumption line naming what differs from the reference (empty for the default row)."""
    c = model_code(stack)
    if c.stack == "default":
        return ""
    parts = [f"NF4 {c.nf4_bytes:.4g} B/param" + (" incl. the output layer" if c.nf4_output_layer else "")
             + ("" if c.kbit_fp32_rest else "; under an NF4 base the embeddings, norms"
                + ("" if c.nf4_output_layer else " and output layer") + " stay in the load dtype (16-bit)")]
    if c.nf4_keeps_input:
        parts.append("each frozen 4-bit linear keeps its input, the previous step's until the next loss (bitsandbytes < 0.43.2)")
    if c.norm_fp32_input:
        parts.append("RMSNorms keep a float32 copy of their input"
                     + (" and, with a trainable weight, the float32 normalised input it multiplies"
                        if c.norm_weight_fp32 else ""))
    if c.kv_expanded:
        parts.append("GQA K/V kept expanded to every query head")
    if c.nf4_dequant_copies > 1:
        parts.append(f"{c.nf4_dequant_copies} 16-bit copies of a 4-bit weight per matmul")
    if c.fsdp_unsharded_accum:
        parts.append("FSDP gradient accumulation keeps every unit's unsharded gradient on the GPU until the syncing "
                     "micro-batch, under CPU offload too (FSDP1 no_sync)")
    if c.offload_grads_held:
        parts.append("under FSDP CPU offload each block's reduced gradient shard stays on the GPU until the backward "
                     "ends (FSDP1)")
    if c.separate_lm_head:
        parts.append("own lm_head matrix (no weight tying)")
    if c.lora_mlp_fused:
        parts.append("with LoRA on gate, up and down its fused LoRA MLP keeps the input and the gate and up outputs "
                     "only (activation and product recomputed in backward) and its backward makes one ffn-wide "
                     "gradient (the activation's gradients written into the gate and up buffers)")
    if c.lora_dropout:
        parts.append("each LoRA-adapted linear keeps its own dropout output and 1-byte mask of its input")
    if c.lora_input_cast:
        parts.append("PEFT's float32 adapters: each LoRA-adapted linear casts its input to them, so under mixed "
                     "precision each keeps its own 16-bit cast of its input (and its gradient passes through "
                     "float32), in pure 16-bit training its own float32 copy (PEFT's GPTQ layer casts nothing under "
                     "autocast)")
    if c.qkv_view:
        parts.append("with one or every query group V is a view of the fused QKV output, which attention keeps "
                     "whole besides the roped Q and K")
    if c.attn_out_copy:
        parts.append("the output projection reads its own copy of the attention output (a reshape, or flash-attn's "
                     "pad_input re-padding), kept besides flash attention's output where the projection keeps its "
                     "input")
    if c.lora_qkv_pad:
        parts.append("LoRA on some of q, k, v keeps the adapter output zero_pad copies")
    if c.logits_fp32_held:
        parts.append("the training loop holds float32 copies of the logits through the backward and the next forward")
    if c.loss_chunk_tokens:
        parts.append(f"chunked cross-entropy over {c.loss_chunk_tokens}-token chunks")
    if c.nf4_dequant_work:
        parts.append(f"dequantising a 4-bit matrix holds {c.nf4_dequant_work:g} B/param at once (the block's largest, "
                     "in its backward)")
    if c.chunk_logits_held:
        parts.append("the chunked loss's forward holds every chunk's 16-bit logits (the model returns them all) while "
                     "it makes each chunk's float32 copy and log-softmax, and a trainable output layer (applied once "
                     "per chunk) sums its per-chunk weight gradients out of place at its backward")
    if c.kbit_fp32_rest:
        parts.append("under an NF4 (bitsandbytes) base the embeddings, norms and output layer are cast to float32 (PEFT "
                     "prepare_model_for_kbit_training): the residual stream is float32 and the output layer's 16-bit "
                     "autocast copy is kept for its backward; a 4-bit linear writes its input's dtype (bitsandbytes), so "
                     "without autocast every activation is float32, and under autocast the MLP's outputs and the "
                     "block's gradients are")
    return f"{c.stack} model code: " + "; ".join(parts) + f" ({c.source.split(':')[0]})"


def peft_adapters(cfg) -> bool:
    """The run's LoRA layers are PEFT's (model_code lora_input_cast): float32 adapters (get_peft_model's
    autocast_adapter_dtype) whose input each casts to their dtype; on unsharded ranks only (FSDP's mixed precision and
    DeepSpeed compute on 16-bit copies of the adapters). The trace builds these layers and the step time counts their
    traffic (estimate.roofline_step.lora_adapter_s)."""
    from gpuwise.estimate.gptq import gptq_format
    from gpuwise.workload.training import AUTOCAST_PRECISIONS

    # PEFT's GPTQ layer (lora/gptq.py) casts only without autocast
    gptq_autocast = gptq_format(cfg.quantize) is not None and cfg.precision in AUTOCAST_PRECISIONS
    return cfg.lora_rank > 0 and model_code(cfg.stack).lora_input_cast and cfg.plan.zero == 0 and not gptq_autocast


def kbit_fp32_stream(cfg) -> bool:
    """The stack's QLoRA recipe casts the rest of the model to float32 (PEFT prepare_model_for_kbit_training,
    model_code kbit_fp32_rest), so the residual stream is float32: on unsharded ranks (FSDP's mixed precision computes
    on 16-bit gathered copies, which the trace does not model for float32 shards)."""
    return cfg.quantize == "nf4" and model_code(cfg.stack).kbit_fp32_rest and cfg.plan.fsdp_ways == 1
