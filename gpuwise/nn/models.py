"""Whole models: decoder-only causal LMs (optionally one pipeline stage of one), BERT/RoBERTa masked
LMs with their pre-training heads, and T5 encoder-decoders. The loss is an fp32 cross-entropy on
the logits, as Hugging Face and torchtitan compute it for large vocabularies."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from gpuwise.nn import functions as fn
from gpuwise.nn import positions as pos
from gpuwise.nn.blocks import Block
from gpuwise.nn.layers import Adapters, Attention, Shard, make_linear, make_norm
from gpuwise.nn.traits import Traits
from gpuwise.workload.model_spec import SCALED_EMBEDDINGS, ModelSpec

_LM_HEAD_BIAS = ("gptj", "phi")


def _sixteen_bit(adapters: Adapters | None) -> Adapters | None:
    """QLoRA keeps the output layer in 16-bit (bitsandbytes skips lm_head; GPTQ quantises the blocks only)."""
    return None if adapters is None else replace(adapters, nf4=False, gptq=None)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, upcast: bool = True) -> torch.Tensor:
    """Cross-entropy over float32-upcast logits (``upcast``; loss kernel eager) or the logits as they are
    (eager-nocast)."""
    x = logits.float() if upcast else logits
    return F.cross_entropy(x.reshape(-1, x.shape[-1]), labels.reshape(-1))


class CausalLM(nn.Module):
    """Decoder-only LM; `embed`/`head` False build a pipeline stage without the embedding or the
    final norm and output layer (its input is then the hidden states of the previous stage)."""

    def __init__(self, spec: ModelSpec, tr: Traits, shard: Shard, adapters: Adapters | None, attention: str,
                 n_layers: int, embed: bool = True, head: bool = True):
        super().__init__()
        h, v = spec.hidden, spec.vocab_size
        self.spec, self.tr, self.shard = spec, tr, shard
        self.compute_dtype: torch.dtype | None = None
        self.loss_chunks = 1                 # > 1: chunked cross-entropy (TrainingConfig.loss_kernel "chunked")
        self.chunk_logits_held = False       # chunked: every chunk's logits made before the loss (torchtune)
        self.logits_fp32_held = 0            # > 0: the loop's float32 copy of the logits, held until the next one is
        #                                      made (LitGPT under Fabric), its loss over chunks of this many tokens
        self.held_logits: torch.Tensor | None = None
        self.loss_upcast = True              # False: cross-entropy in the logits' dtype (loss_kernel "eager-nocast")
        self.padding_mask = False            # True: a b x 1 x s x s additive mask in the stream's dtype reaches every
        #                                      attention (TrainingConfig.padding_mask: Hugging Face sdpa, padded batches)
        self.tok = nn.Embedding(v, h) if embed else None
        self.pos = nn.Embedding(spec.max_seq_len, h) if embed and tr.positions == "learned" else None
        self.emb_norm = make_norm(spec) if embed and spec.family == "bloom" else None
        self.blocks = nn.ModuleList(Block(spec, tr, shard, adapters, attention, layer=i) for i in range(n_layers))
        self.norm = make_norm(spec) if head else None
        self.head = None
        self.head_weight = None
        if head and not spec.tied_embeddings:
            self.head = make_linear(h, v, spec.family in _LM_HEAD_BIAS, _sixteen_bit(adapters),
                                    adapters is not None and adapters.on("head"))
        elif head and not embed:                       # pipeline last stage keeps its copy of the tied table
            self.head_weight = nn.Parameter(torch.empty(v, h))

    def _dtype(self, x: torch.Tensor) -> torch.dtype:
        return self.compute_dtype or x.dtype

    def _positions(self, x: torch.Tensor):
        """rotary (cos, sin) or an ALiBi bias for attention inputs of the gathered length."""
        if not len(self.blocks):
            return None, None
        blk = next(m for m in self.blocks.modules() if isinstance(m, Attention))
        s_q = x.shape[1] * self.shard.sp_ways
        rope, bias = None, None
        if self.tr.positions == "rotary":
            rope = pos.rotary(s_q, blk.rotary_dims, x.device)
        elif self.tr.positions == "alibi":
            bias = pos.alibi(blk.heads, s_q, s_q * self.shard.cp, self._dtype(x), x.device)
        if self.padding_mask:     # made once per forward in the stream's dtype; each attention casts it as it runs
            mask = torch.zeros(x.shape[0], 1, s_q, s_q * self.shard.cp, dtype=x.dtype, device=x.device)
            bias = mask if bias is None else bias + mask
        return rope, bias

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids)
        if self.pos is not None:
            x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
        if self.spec.family in SCALED_EMBEDDINGS:
            x = x * math.sqrt(self.spec.hidden)
        if self.emb_norm is not None:
            x = self.emb_norm(x)
        x = fn.dropout(x, self.tr.dropout, self.training)
        return fn.scatter(x, self.shard.sp_ways, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """x: token ids (first stage) or hidden states; returns the loss when `labels` is given,
        else the logits (last stage) or hidden states."""
        if self.tok is not None:
            x = self.embed(x)
        rope, bias = self._positions(x)
        for blk in self.blocks:
            x = blk(x, rope, bias)
        if self.norm is None:
            return x
        x = fn.gather(self.norm(x), self.shard.sp_ways, 1)
        if labels is not None and self.logits_fp32_held:
            return self._held_fp32_loss(x, labels)
        if labels is not None and self.loss_chunks > 1:
            # the output layer and a float32 cross-entropy per token chunk, each chunk's logits made as its loss runs;
            # torchtune (chunk_logits_held): its model returns every chunk's logits, then CEWithChunkedOutputLoss
            # upcasts each (a tied table is cast once, as autocast's weight cache does, not once per chunk)
            w = None if self.head is not None else self._tied_weight(x)
            xs, ys = x.chunk(self.loss_chunks, 1), labels.chunk(self.loss_chunks, 1)
            if self.chunk_logits_held:       # the model returns the list of chunk logits, the loss upcasts each
                logits = [self._logits(xc, w) for xc in xs]
                return sum(lm_loss(lc, yc) for lc, yc in zip(logits, ys)) / self.loss_chunks
            return sum(lm_loss(self._logits(xc, w), yc) for xc, yc in zip(xs, ys)) / self.loss_chunks
        logits = self._logits(x)
        return logits if labels is None else lm_loss(logits, labels, self.loss_upcast)

    def _held_fp32_loss(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """LitGPT under Fabric bf16-true (model_code logits fp32-held): the model's 16-bit logits converted to float32
        by Fabric's output conversion, which the training loop's `logits` variable holds through the backward and the
        next step's forward (here: until the next float32 copy replaces it), and a cross-entropy over chunks of
        `logits_fp32_held` tokens (litgpt chunked_cross_entropy)."""
        held = self._logits(x).float()
        self.held_logits = held
        k = self.logits_fp32_held
        flat, ys = held.reshape(-1, held.shape[-1]), labels.reshape(-1)       # flattened, then split by tokens
        chunks = [F.cross_entropy(lc, yc, reduction="sum") for lc, yc in zip(flat.split(k), ys.split(k))]
        return sum(chunks) / ys.numel()

    def _tied_weight(self, x: torch.Tensor) -> torch.Tensor:
        w = self.head_weight if self.head_weight is not None else self.tok.weight
        return w.to(self._dtype(x))

    def _logits(self, x: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        if self.head is not None:
            logits = self.head(x)
        else:
            logits = F.linear(x.to(self._dtype(x)), self._tied_weight(x) if w is None else w)
        # Gemma 2's final-logit soft-capping in the logits' dtype (transformers Gemma2ForCausalLM, litgpt GPT.forward):
        # tanh keeps its logits-sized output for backward
        return fn.softcap(logits, self.spec.final_softcap)


class MaskedLM(nn.Module):
    """BERT / RoBERTa with the pre-training heads (MLM transform + tied decoder; BERT: pooler + NSP)."""

    def __init__(self, spec: ModelSpec, tr: Traits, shard: Shard, adapters: Adapters | None, attention: str,
                 n_layers: int):
        super().__init__()
        h, v = spec.hidden, spec.vocab_size
        self.tr, self.shard, self.nsp = tr, shard, spec.family == "bert"
        self.compute_dtype: torch.dtype | None = None
        self.loss_chunks = 1                 # > 1: chunked cross-entropy (TrainingConfig.loss_kernel "chunked")
        self.tok, self.pos = nn.Embedding(v, h), nn.Embedding(spec.max_seq_len, h)
        self.types = nn.Embedding(2 if self.nsp else 1, h)
        self.emb_norm = make_norm(spec)
        self.blocks = nn.ModuleList(Block(spec, tr, shard, adapters, attention, causal=False)
                                    for _ in range(n_layers))
        self.transform = make_linear(h, h, True, adapters, False)
        self.transform_norm = make_norm(spec)
        self.decoder_bias = nn.Parameter(torch.zeros(v))
        if self.nsp:
            self.pooler = make_linear(h, h, True, adapters, False)
            self.nsp_head = make_linear(h, 2, True, adapters, False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        s = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(s, device=ids.device)) + self.types(torch.zeros_like(ids))
        x = fn.scatter(fn.dropout(self.emb_norm(x), self.tr.dropout, self.training), self.shard.sp_ways, 1)
        for blk in self.blocks:
            x = blk(x)
        x = fn.gather(x, self.shard.sp_ways, 1)
        t = self.transform_norm(F.gelu(self.transform(x)))
        dt = self.compute_dtype or t.dtype
        logits = F.linear(t.to(dt), self.tok.weight.to(dt), self.decoder_bias.to(dt))
        if labels is None:
            return logits
        loss = lm_loss(logits, labels)
        if self.nsp:
            nsp = self.nsp_head(torch.tanh(self.pooler(x[:, 0])))
            loss = loss + F.cross_entropy(nsp.float(), torch.zeros_like(labels[:, 0]))
        return loss


class _T5Stack(nn.Module):
    def __init__(self, spec, tr, shard, adapters, attention, n_layers, decoder: bool):
        super().__init__()
        self.decoder = decoder
        self.rel = nn.Embedding(32, spec.n_heads)
        self.blocks = nn.ModuleList(Block(spec, tr, shard, adapters, attention, causal=decoder, cross=decoder)
                                    for _ in range(n_layers))
        self.norm = make_norm(spec)
        self.p, self.ways = tr.dropout, shard.sp_ways

    def forward(self, x, dtype, enc=None):
        s = x.shape[1] * self.ways
        bias = pos.t5_bias(self.rel, s, s, self.decoder, dtype)
        x = fn.dropout(x, self.p, self.training)
        for blk in self.blocks:
            x = blk(x, None, bias, enc)
        return fn.dropout(self.norm(x), self.p, self.training)


class T5(nn.Module):
    """Encoder-decoder (T5 / T5 v1.1 / mT5): shared embedding, relative-bias attention, no biases."""

    def __init__(self, spec: ModelSpec, tr: Traits, shard: Shard, adapters: Adapters | None, attention: str,
                 n_layers: int, n_encoder_layers: int):
        super().__init__()
        self.spec, self.shard = spec, shard
        self.compute_dtype: torch.dtype | None = None
        self.loss_chunks = 1                 # > 1: chunked cross-entropy (TrainingConfig.loss_kernel "chunked")
        self.tok = nn.Embedding(spec.vocab_size, spec.hidden)
        self.encoder = _T5Stack(spec, tr, shard, adapters, attention, n_encoder_layers, False)
        self.decoder = _T5Stack(spec, tr, shard, adapters, attention, n_layers, True)
        self.head = None if spec.tied_embeddings else make_linear(spec.hidden, spec.vocab_size, False,
                                                                    _sixteen_bit(adapters), False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """ids: encoder input; the decoder reads the labels shifted right (same length here)."""
        dec_ids = ids if labels is None else torch.cat((torch.zeros_like(labels[:, :1]), labels[:, :-1]), 1)
        e = fn.scatter(self.tok(ids), self.shard.sp_ways, 1)
        dt = self.compute_dtype or e.dtype
        enc = fn.gather(self.encoder(e, dt), self.shard.sp_ways, 1)
        d = fn.scatter(self.tok(dec_ids), self.shard.sp_ways, 1)
        x = fn.gather(self.decoder(d, dt, enc), self.shard.sp_ways, 1)
        if self.head is not None:
            logits = self.head(x)
        else:
            logits = F.linear((x * self.spec.hidden ** -0.5).to(dt), self.tok.weight.to(dt))
        return logits if labels is None else lm_loss(logits, labels)
