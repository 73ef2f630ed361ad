"""Activation memory of transformer training, after Korthikanti et al. 2022 (arXiv 2205.05198).

Korthikanti et al. count the bytes autograd keeps per layer for backward in a GPT layer with fp16
activations, 1-byte dropout masks and tensor parallelism t:

    sbh (10 + 24/t + 5as/(ht))          (sequence parallelism divides the 10 by t as well)

Here the same accounting is written tensor by tensor so that it generalises:
- GQA: K and V hold n_kv_heads * head_dim features instead of h;
- gated MLPs (SwiGLU/GeGLU, PyTorch eager): gate, up, act(gate) and their product are kept (4f)
  instead of the GeLU input and output (2f);
- MoE: every token runs experts_per_token experts, so the MLP terms are multiplied by it;
- flash attention keeps no s^2 tensors (only the output and a float32 log-sum-exp per head);
- families without dropout (llama, mistral, qwen2, ...) keep no masks;
- context parallelism splits the sequence (activations / cp);
- sequence parallelism (Korthikanti et al.) splits the norm and dropout tensors over tp too; under
  DTensor-based SP (torchtitan) the QKV and MLP-input linears keep the all-gathered input whole
  (`sp_keeps_gathered`), Megatron-core re-gathers it in backward;
- recompute (training.recompute_policy names): selective (Megatron) drops the attention core's
  tensors, full keeps each layer's input plus one layer's working set, layer-K does that for every
  K-th block, op (torchtitan op-level SAC) keeps every second matmul output and the attention output;
- Gemma 2: four norms per block (each keeps its input); attention-logit soft-capping (tanh(x / cap) * cap on the
  s x s scores) keeps tanh's s x s output under eager attention as well, and nothing under flash attention
  (flash-attn >= 2.6 applies it in the kernel; transformers 4.49's SDPA path drops it); final-logit soft-capping
  keeps tanh's logits-sized output (the logits' dtype) until the loss's backward;
- LoRA (frozen base): autograd keeps a linear layer's input only to compute its weight gradient,
  so inputs that feed only frozen matrices (MLP input, down-projection input, output-projection
  input under eager attention) are not kept; the QKV input is (the adapters read it).
With MHA, f = 4h, dropout, no flash and 2-byte activations the terms reduce exactly to the
formula above (tests check it).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwise.estimate.lora import FUSED_GATE_UP, FUSED_QKV
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.training import LOSS_CHUNKS, recompute_policy

# Families whose published configs train with dropout > 0 (masks are kept for backward).
DROPOUT_FAMILIES = ("gpt2", "bert", "roberta", "t5")


@dataclass(frozen=True)
class ActivationSetting:
    """What shapes a layer's saved activations (all per GPU, per micro-batch)."""

    micro_batch: int          # sequences per micro-batch (b)
    seq_len: int              # tokens per sequence before context parallelism (s)
    tp: int = 1               # tensor-parallel degree (t)
    sp: bool = False          # sequence parallelism: norms/dropouts split over tp too
    cp: int = 1               # context parallelism: sequence split over cp GPUs
    bytes_per_value: int = 2  # 2 for bf16/fp16 activations, 4 for fp32
    flash: bool = True        # flash attention: no s^2 tensors kept
    recompute: str = "none"   # none | selective | op | layer-K | full (training.RECOMPUTE_POLICIES)
    frozen_base: bool = False # LoRA: base weights need no gradient, so inputs kept only for them are dropped
    mask_copy: float = 0.0    # bytes per layer and micro-batch of autocast's 16-bit cast of a float32 padding mask,
    #                           saved by that layer's attention kernel (memory.padding_mask_copy_bytes)
    adapted: frozenset = frozenset()  # LoRA target modules (lora.lora_modules): their inputs are kept (the adapters
    #                                   read them)
    sp_keeps_gathered: bool = False  # SP as DTensor (torchtitan) does it: linears keep the gathered input;
    #                                  False = Megatron-core, which re-gathers it in backward
    hf_eager: bool = False    # eager attention as Hugging Face writes it: K/V repeated per query head and a
    #                           float32 softmax cast back (both kept); False = Megatron's fused 16-bit softmax
    low_norms: bool = False   # low-precision norms (llm-foundry LPLayerNorm): under autocast they read and write the
    #                           16-bit dtype, so the linears after them need no casts of their own
    compiled: bool = False    # torch.compile: inductor's partitioner recomputes a gated MLP's pointwise ops in
    #                           backward, so it keeps gate and up only; a GeLU MLP keeps what eager keeps (measured
    #                           on an H200: compiled mpt-1b, gpt2-xl and mpt-350m within 2% of eager; gpu_runs.csv)
    fp8_inputs: bool = False  # Transformer Engine fp8: GEMM inputs saved for backward in fp8 (1 B)
    autocast: bool = False    # torch.autocast over fp32 weights: the residual stream and the norms stay
    #                           fp32 and every linear keeps its own 16-bit cast of its input (autocast
    #                           caches casts of weights only), so q, k and v each hold a copy
    frozen_keeps_inputs: bool = False  # frozen linears keep their input anyway (bitsandbytes < 0.43.2 4-bit matmul)
    kept_weights: float = 0.0          # bytes per layer of frozen-weight copies autograd keeps (GPTQ's dequantised
    #                                    weights; PEFT's DoRA re-run matmuls under dropout)
    dora_token_bytes: float = 0.0      # bytes per token per layer DoRA's layers keep beyond LoRA's (estimate.dora)
    norm_fp32: bool = False   # norms upcast and keep a float32 copy of their input (LitGPT RMSNorm x.float())
    norm_weight_fp32: bool = False  # a norm's weight multiplies its float32 normalised input: a trainable weight keeps
    #                           that float32 product (torchtune RMSNorm, F.rms_norm on x.float())
    kv_expanded: bool = False # GQA K/V expanded to every query head before attention (kept at query width)
    fp32_outputs: bool = False  # linear layers write float32 outputs: float32 weights and inputs without autocast
    #                           (PEFT prepare_model_for_kbit_training's float32 rest in pure 16-bit training, where
    #                           bitsandbytes Linear4bit casts its output to its float32 input's dtype): float32 logits
    nf4_stream_outputs: bool = False  # under autocast over a float32 stream (PEFT's float32 rest), the 4-bit linears
    #                           write their float32 input's dtype (bitsandbytes Linear4bit out.to(inp_dtype)): the MLP's
    #                           f-wide outputs and the block's gradients are float32; the attention core still gets
    #                           autocast's 16-bit casts, and each adapter its own 16-bit input cast
    mlp_bwd_ffn: int = 2      # ffn-wide gradients the MLP backward allocates: 2 eager (gate and up, or the activation's
    #                           input and output); 1 where a fused kernel writes them into its saved buffers (Unsloth)
    lora_input_fp32: bool = False  # PEFT in pure 16-bit training (no autocast) on a 16-bit stream: its adapters are
    #                           float32 (get_peft_model autocast_adapter_dtype) and each adapted linear casts its input to
    #                           them (x.to(lora_A.weight.dtype)), so each keeps its own float32 copy of its input
    adapter_dropout: bool = False  # LoRA dropout (p > 0) in PEFT-style layers (one adapter per linear, q, k and v
    #                           separate): each adapted linear keeps a 1-byte mask and its adapter's own input (the
    #                           dropout output, or its cast), none shared; LitGPT's layers: `lora_dropout`
    lora_input_cast: bool = False  # under autocast each LoRA-adapted linear keeps its own 16-bit cast of its input
    #                           (PEFT Linear.forward x.to(lora_A.weight.dtype), float32 adapters): q and v reading one
    #                           normed input keep two copies, gate and up two
    lora_dropout: bool = False  # each LoRA-adapted linear runs its own dropout (p > 0) on its input (LitGPT LoRALinear,
    #                           LoRAQKVLinear): the dropout output (the adapter's input) and a 1-byte mask are kept per
    #                           adapted linear, none shared between linears that read the same input
    qkv_view: bool = False    # V is a view of the fused QKV output (LitGPT CausalSelfAttention with one or every
    #                           query group): attention keeps the whole QKV output besides the roped Q and K copies
    attn_out_copy: bool = False  # the output projection reads its own copy of the attention output (LitGPT
    #                           y.transpose(1, 2).reshape; llm-foundry's flash path re-pads it with flash-attn's
    #                           pad_input): a projection that keeps its input keeps it besides the output flash
    #                           attention keeps
    lora_qkv_pad: bool = False  # LitGPT LoRAQKVLinear.zero_pad, with some of q, k, v not adapted: its index_copy keeps
    #                           its source, the adapter output of the adapted parts (16-bit)
    logits_fp32_held: bool = False  # the training loop holds float32 copies of the logits (Fabric bf16-true
    #                           convert_output) through the backward and until the next forward returns
    loss_chunk_tokens: int = 0  # chunked loss over chunks of this many tokens per sequence (LitGPT lm_head_chunk_size
    #                           128); 0: LOSS_CHUNKS chunks
    chunk_logits_held: bool = False  # the chunked loss's forward holds every chunk's 16-bit logits, which the model
    #                           returns as one list (torchtune TransformerDecoder.chunked_output), while it makes each
    #                           chunk's float32 copy and log-softmax: at its last chunk all the 16-bit logits, all the
    #                           float32 log-softmax and one chunk's float32 copy are alive


def _keeps_input(st: ActivationSetting, *modules: str) -> bool:
    """True if autograd keeps the input of a linear layer that feeds `modules`: a trainable base, or a
    LoRA adapter on one of them."""
    return not st.frozen_base or st.frozen_keeps_inputs or bool(st.adapted.intersection(modules))


def _gemm_input_bytes(st: ActivationSetting) -> float:
    """Bytes per value of a saved GEMM input: fp8 under Transformer Engine fp8, else the activation dtype."""
    return 1.0 if st.fp8_inputs else st.bytes_per_value


def has_dropout(spec: ModelSpec) -> bool:
    return spec.family in DROPOUT_FAMILIES


def _norms(spec: ModelSpec) -> int:
    return spec.norms_per_block


def _input_copies(spec: ModelSpec, st: ActivationSetting) -> tuple[float, float]:
    """(extra hidden-wide copies of the attention input, of the MLP input) per token that autocast
    keeps beyond the one copy `layer_bytes` counts: one 16-bit cast per linear that reads it, and
    for single-norm parallel blocks the MLP reads the attention's normed input (one shared tensor
    without autocast, a separate cast with it)."""
    single = _norms(spec) == 1
    if not st.autocast or st.low_norms:
        # single-norm parallel blocks share the normed input; LitGPT's LoRA dropout gives the MLP its own copy
        shared = single and _keeps_input(st, "gate", "up") and not (st.lora_dropout and st.frozen_base)
        return 0.0, (-1.0 if shared else 0.0)
    if st.frozen_base:
        return 0.0, 0.0
    k = spec.experts_per_token if spec.n_experts > 1 else 1
    qkv = 1 if spec.family in FUSED_QKV else 3
    mlp = (2 if spec.gated_mlp and spec.family not in FUSED_GATE_UP else 1) * k
    return qkv - 1.0, mlp - float(k)


def attention_bytes_per_token(spec: ModelSpec, st: ActivationSetting, kv_len: int | None = None) -> tuple[float, float]:
    """(replicated-under-TP, split-under-TP) bytes per local token for one attention block,
    excluding its norm. kv_len: keys each query attends to (default: the full sequence)."""
    e, mask = st.bytes_per_value, (1 if has_dropout(spec) else 0)
    h, dq, dkv = spec.hidden, spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    kv_len = st.seq_len if kv_len is None else kv_len
    replicated = h * _gemm_input_bytes(st) + h * mask    # QKV input (norm output) + output-dropout mask
    kv = dq if st.kv_expanded else dkv               # K/V expanded to every query head (LitGPT) or not
    split = (dq + 2 * kv) * e                        # Q, K, V
    if _keeps_input(st, "o") or st.flash:
        split += dq * e        # output-projection input (flash attention keeps it as its output anyway)
    lora_rep, lora_split = _lora_dropout_attention(spec, st)
    replicated, split = replicated + lora_rep, split + lora_split
    replicated += _adapter_group_bytes(st, ("q", "k", "v"), spec.family in FUSED_QKV) * spec.hidden
    split += _adapter_single_bytes(st, "o") * dq
    if st.attn_out_copy and st.flash and (not st.frozen_base or st.frozen_keeps_inputs
                                          or ("o" in st.adapted and not (st.lora_dropout or st.adapter_dropout))):
        # the projection's input copy besides flash attention's output (an adapter with dropout keeps its dropout
        # output instead: _adapter_single_bytes)
        split += dq * e
    if st.qkv_view and spec.n_kv_heads in (1, spec.n_heads):
        split += (dq + 2 * dkv - kv) * e             # the QKV output V views, beyond the V counted above
    if st.recompute == "selective":
        pass                                         # the attention core is recomputed in backward
    elif st.flash:
        split += spec.n_heads * 4                    # float32 log-sum-exp per head
    else:
        split += _eager_attention_bytes(spec, st, kv_len, kv, mask)
    return replicated, split


def _lora_dropout_attention(spec: ModelSpec, st: ActivationSetting) -> tuple[float, float]:
    """(replicated, split) bytes per token that LitGPT's LoRA attention keeps beyond the reference: the QKV
    adapter's dropout mask (its dropout output replaces the kept QKV input), the output projection's dropout
    output (flash attention keeps its own output as well) and mask, and zero_pad's kept adapter output."""
    if not st.frozen_base:
        return 0.0, 0.0
    e, dq, dkv = st.bytes_per_value, spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    rep, split = 0.0, 0.0
    qkv = [w for m, w in (("q", dq), ("k", dkv), ("v", dkv)) if m in st.adapted]
    if st.lora_dropout:
        # the QKV adapter's mask; a 4-bit QKV linear keeps the normed input besides the adapter's dropout output
        rep += spec.hidden * (1 + (e if st.frozen_keeps_inputs else 0)) if qkv else 0.0
        split += dq * ((e if st.flash else 0) + 1) if "o" in st.adapted else 0.0
    if st.lora_qkv_pad and 0 < len(qkv) < 3:
        split += sum(qkv) * e
    return rep, split


def _adapter_own_bytes(st: ActivationSetting) -> float:
    """Bytes per input value each adapted linear keeps of its own input where its adapter does not share the input
    the reference counts once (0: shared): with LoRA dropout (`adapter_dropout`) its mask (1 B) and the adapter's own
    input (the dropout output or its cast); without, PEFT's cast: a float32 copy in pure 16-bit training
    (`lora_input_fp32`) or autocast's 16-bit cast (`lora_input_cast`). LitGPT's layers have their own rules."""
    if not st.frozen_base or st.lora_dropout:
        return 0.0
    e = float(st.bytes_per_value)
    if st.adapter_dropout:
        return (4.0 if st.lora_input_fp32 else e) + 1.0
    return 4.0 if st.lora_input_fp32 else (e if st.lora_input_cast else 0.0)


def _adapter_group_bytes(st: ActivationSetting, group: tuple[str, ...], fused: bool) -> float:
    """Bytes per input value beyond the reference's one copy that the adapted linears of `group` (separate linears
    reading one input; `fused`: one matrix) keep of their own inputs (`_adapter_own_bytes` each)."""
    own = _adapter_own_bytes(st)
    n = len(st.adapted.intersection(group))
    n = min(1, n) if fused else n
    return n * own - st.bytes_per_value if own and n else 0.0


def _adapter_single_bytes(st: ActivationSetting, module: str) -> float:
    """The same for an adapted output or down projection: its own input copy besides flash attention's own output
    for the output projection (the reference counts one copy, flash's output or the projection's input), in place
    of that copy otherwise."""
    own = _adapter_own_bytes(st) if module in st.adapted else 0.0
    if not own:
        return 0.0
    return own if module == "o" and st.flash else own - st.bytes_per_value


def _eager_attention_bytes(spec: ModelSpec, st: ActivationSetting, kv_len: int, kv: int, mask: int) -> float:
    """Bytes per local token an eager attention core keeps beyond Q, K and V: its s x s tensors (and Hugging Face's
    repeated K/V); soft-capping (Gemma 2) adds tanh's s x s output in the activation dtype (the division and the product by the cap
    keep nothing)."""
    e, dq = st.bytes_per_value, spec.n_heads * spec.head_dim
    split = spec.n_heads * kv_len * e if spec.attn_softcap else 0.0
    if st.hf_eager:
        split += 2 * (dq - kv) * e                   # K and V repeated to every query head, kept by the matmuls
        # float32 softmax output, and what the probs@V matmul reads: the dropout output (+ its mask),
        # or without dropout the 16-bit cast of the softmax (no copy in fp32)
        after = (1 + e) if mask else (e if e < 4 else 0)
        return split + spec.n_heads * kv_len * (4 + after)
    # softmax output (+ dropout mask and dropout output when attention dropout is on)
    per_score = (2 * e + mask) if mask else e
    return split + spec.n_heads * kv_len * per_score


def mlp_bytes_per_token(spec: ModelSpec, st: ActivationSetting) -> tuple[float, float]:
    """(replicated, split) bytes per local token for one MLP block (all routed experts), excl. norm."""
    e, mask = st.bytes_per_value, (1 if has_dropout(spec) else 0)
    k = spec.experts_per_token if spec.n_experts > 1 else 1
    # first linear's input
    replicated = spec.hidden * mask + (spec.hidden * _gemm_input_bytes(st) * k if _keeps_input(st, "gate", "up") else 0)
    fused_in = not spec.gated_mlp or spec.family in FUSED_GATE_UP
    replicated += k * _adapter_group_bytes(st, ("gate", "up"), fused_in) * spec.hidden
    if spec.n_experts > 1:
        # the router weights multiply each routed expert's output: their gradient needs those k outputs
        replicated += spec.hidden * e * k
    # kept f-wide tensors: gated (gate, up, act(gate), product) / plain (act input, act output); a frozen
    # down-projection needs no copy of its input (product / act output)
    down_in = _keeps_input(st, "down")
    if st.compiled and spec.gated_mlp:   # gate and up only: the down projection's input is recomputed
        per_expert = 2 * spec.ffn_hidden * e
    else:                    # the down projection's input (the last f-wide tensor) as its GEMM saves it
        fe = 4 if st.nf4_stream_outputs else e      # the f-wide outputs of gate / up and the activation
        per_expert = (((4 if spec.gated_mlp else 2) - 1) * fe + (_gemm_input_bytes(st) if down_in else 0)) \
            * spec.ffn_hidden
    split = k * per_expert + (spec.n_experts * 4 if spec.n_experts > 1 else 0)   # + float32 router logits
    split += k * _adapter_single_bytes(st, "down") * spec.ffn_hidden
    if st.lora_dropout and st.frozen_base:
        # LitGPT: every adapted MLP linear keeps its own dropout output and 1-byte mask of its input (the gate and up
        # linears each one, of the same input; the reference counts that input once)
        ins = len({"gate", "up"} & st.adapted) if spec.gated_mlp else int("up" in st.adapted)
        replicated += k * spec.hidden * (max(0, ins - 1) * e + ins)
        split += k * spec.ffn_hidden if "down" in st.adapted else 0.0
        if st.frozen_keeps_inputs:       # 4-bit linears keep their own inputs besides the adapters' dropout outputs
            replicated += k * spec.hidden * e if ins and _norms(spec) > 1 else 0.0    # single norm: QKV's input
            split += k * spec.ffn_hidden * e if "down" in st.adapted else 0.0
    return replicated, split


def layer_bytes(spec: ModelSpec, st: ActivationSetting, cross_attention: bool = False) -> float:
    """Bytes one layer keeps for backward for one micro-batch on one GPU (no recompute applied
    beyond the selective/flash s^2 rule; full recompute is handled by `stack_bytes`)."""
    e = st.bytes_per_value
    tokens = st.micro_batch * st.seq_len / st.cp
    a_rep, a_split = attention_bytes_per_token(spec, st)
    m_rep, m_split = mlp_bytes_per_token(spec, st)
    norms = _norms(spec) + (1 if cross_attention else 0)
    qkv_x, mlp_x = _input_copies(spec, st) if not cross_attention else (0.0, 0.0)
    norm_e = _norm_input_bytes(st)                    # autocast: norm inputs are the fp32 residual stream
    post = 2 if spec.post_norms else 0                # Gemma 2's post-branch norms read a linear's output
    rep = (a_rep + m_rep + (norms - post) * spec.hidden * norm_e + post * spec.hidden * _post_norm_input_bytes(st)
           + (qkv_x + mlp_x) * spec.hidden * e + norms * spec.hidden * _norm_product_bytes(st))
    split = a_split + m_split
    if cross_attention:                               # decoder cross-attention over the encoder output
        c_rep, c_split = attention_bytes_per_token(spec, st)
        rep, split = rep + c_rep, split + c_split
    if st.sp and st.sp_keeps_gathered:
        # DTensor SP: the column-parallel linears save the all-gathered (whole-sequence) input
        k = spec.experts_per_token if spec.n_experts > 1 else 1
        gathered = spec.hidden * e * ((2 if cross_attention else 1) + (k if _keeps_input(st, "gate", "up") else 0) + qkv_x
                                + mlp_x)
        return tokens * (gathered + (rep - gathered) / st.tp + split / st.tp) + st.mask_copy + st.kept_weights + tokens * st.dora_token_bytes
    rep_div = st.tp if st.sp else 1
    return tokens * (rep / rep_div + split / st.tp) + st.mask_copy + st.kept_weights + tokens * st.dora_token_bytes


def layer_input_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """The checkpointed input of one layer under full recompute."""
    tokens = st.micro_batch * st.seq_len / st.cp
    return tokens * spec.hidden * residual_bytes(st) / (st.tp if st.sp else 1)


def residual_bytes(st: ActivationSetting) -> int:
    """Bytes per value of the residual stream between blocks (fp32 under autocast)."""
    return 4 if st.autocast else st.bytes_per_value


def _norm_input_bytes(st: ActivationSetting) -> int:
    """Bytes per value a norm keeps of its input: the residual stream's, a low-precision norm's 16-bit cast, or
    the float32 copy a norm that upcasts its input keeps (LitGPT's RMSNorm)."""
    if st.norm_fp32:
        return 4
    return st.bytes_per_value if st.low_norms else residual_bytes(st)


def _norm_product_bytes(st: ActivationSetting) -> int:
    """Bytes per value a trainable norm weight keeps of the float32 normalised input it multiplies (torchtune's
    RMSNorm); 0 where the norm keeps no such product (frozen weights, or a 16-bit product the reference counts)."""
    return 4 if st.norm_weight_fp32 and st.norm_fp32 and not st.frozen_base else 0


def _post_norm_input_bytes(st: ActivationSetting) -> int:
    """Bytes per value a post-branch norm (Gemma 2) keeps of its input, the output projection's or down projection's
    output: the linear's output dtype (16-bit under autocast, not the float32 residual stream), or the float32
    copy a norm that upcasts keeps."""
    return 4 if st.norm_fp32 or st.fp32_outputs else st.bytes_per_value


def _matmul_outputs(spec: ModelSpec, cross_attention: bool = False) -> list[tuple[int, bool]]:
    """(width, column-parallel) of each weight matmul of one block, in forward order (a decoder block
    with cross-attention runs a second attention's projections between self-attention and MLP)."""
    dq, dkv = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    f, h = spec.ffn_hidden, spec.hidden
    attn = [(dq + 2 * dkv, True)] if spec.family in FUSED_QKV else [(dq, True), (dkv, True), (dkv, True)]
    mlp = [(f, True), (f, True), (h, False)] if spec.gated_mlp else [(f, True), (h, False)]
    return (attn + [(h, False)]) * (2 if cross_attention else 1) + mlp


def op_sac_recomputed_fraction(spec: ModelSpec) -> float:
    """Share of a block's weight-matmul FLOPs that op-level SAC recomputes (its 2nd, 4th, ... matmul)."""
    h, f = spec.hidden, spec.ffn_hidden
    ins = []                                        # input width of each matmul, in _matmul_outputs order
    outs = _matmul_outputs(spec)
    n_attn = len(outs) - (3 if spec.gated_mlp else 2)
    for i, (width, _) in enumerate(outs):
        if i < n_attn - 1 or (n_attn <= i < len(outs) - 1):
            ins.append(h)                           # QKV and MLP up/gate read the hidden state
        elif i == n_attn - 1:
            ins.append(spec.n_heads * spec.head_dim)    # attention output projection
        else:
            ins.append(f)                           # MLP down projection
    flops = [w * d for (w, _), d in zip(outs, ins)]
    return sum(x for i, x in enumerate(flops) if i % 2 == 1) / sum(flops)


def op_sac_layer_bytes(spec: ModelSpec, st: ActivationSetting, cross_attention: bool = False) -> float:
    """torchtitan op-level selective AC: a block keeps its input, the outputs of its 1st, 3rd, 5th...
    weight matmul (the policy recomputes every second mm) and the attention kernel's output and
    float32 log-sum-exp; everything else is recomputed in backward. Row-parallel matmul outputs are
    full width on every TP rank (partial sums before the reduction); MoE: the routed experts'
    matmuls count k times. A decoder block with cross-attention counts its matmuls in one sequence
    (the policy's counter runs over the whole block: T5's ten matmuls keep five outputs, not twice
    the three of a block without it) and keeps both attention kernels' outputs."""
    e = st.bytes_per_value
    tokens = st.micro_batch * st.seq_len / st.cp
    k = spec.experts_per_token if spec.n_experts > 1 else 1
    per_token = spec.hidden * residual_bytes(st) / (st.tp if st.sp else 1)   # block input
    mms = _matmul_outputs(spec, cross_attention)
    n_attn = len(mms) - (3 if spec.gated_mlp else 2)
    for i, (width, col) in enumerate(mms):
        if i % 2 == 0:                                                     # 1st, 3rd, ... saved
            per_token += width * e * (k if i > n_attn else 1) / (st.tp if col else 1)
    attentions = 2 if cross_attention else 1                               # attention out + lse
    per_token += attentions * (spec.n_heads * spec.head_dim * e / st.tp + spec.n_heads * 4 / st.tp)
    return tokens * per_token


def _kept_by_policy(spec: ModelSpec, st: ActivationSetting, layer_index: int, cross_attention: bool) -> float:
    pol = recompute_policy(st.recompute)
    if pol.checkpointed(layer_index):
        return layer_input_bytes(spec, st)
    if pol.kind == "op":
        return op_sac_layer_bytes(spec, st, cross_attention)
    return layer_bytes(spec, st, cross_attention)


def stack_bytes(spec: ModelSpec, st: ActivationSetting, n_layers: int, cross_attention: bool = False) -> float:
    """Activations that `n_layers` consecutive layers keep for one micro-batch until its backward
    (full / layer-K: checkpointed blocks keep only their input; op: op_sac_layer_bytes; see
    `working_set_bytes` for what recomputation re-materialises)."""
    if n_layers <= 0:
        return 0.0
    # what a layer keeps repeats with the policy's period (layer-K: K; else 1): compute one period, sum per layer
    period = [_kept_by_policy(spec, st, i, cross_attention) for i in range(min(n_layers, recompute_policy(st.recompute).every))]
    return sum(period[i % len(period)] for i in range(n_layers))


def working_set_bytes(spec: ModelSpec, st: ActivationSetting, cross_attention: bool = False) -> float:
    """Recomputation re-materialises one block's activations during its backward (once per GPU):
    full, layer-K and op-level AC the block's; selective the attention core it did not keep (eager
    attention's softmax scores: nothing with flash attention); none keeps everything anyway."""
    kind = recompute_policy(st.recompute).kind
    if kind == "selective":
        from dataclasses import replace

        return layer_bytes(spec, replace(st, recompute="none"), cross_attention) - layer_bytes(spec, st, cross_attention)
    if kind in ("full", "layer"):
        # the checkpointed input it keeps is the first tensor the re-run block saves again (the same storage)
        return layer_bytes(spec, st, cross_attention) - layer_input_bytes(spec, st)
    return layer_bytes(spec, st, cross_attention) if kind == "op" else 0.0


def backward_transient_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """Gradient tensors alive inside one block's backward: the gradient flowing into the block and
    the one leaving it (hidden wide) plus two ffn-wide gradients in the MLP (gate and up, or the
    activation's input and output; `mlp_bwd_ffn` where a fused kernel makes fewer). Not counted: a flash
    kernel's backward buffers (flash-attn 2.x and PyTorch's port, flash_api.cpp mha_bwd: float32 dq_accum and
    softmax_d, GQA dK/dV at query-head width), alive only after the MLP's backward has freed its tensors and its
    gradients: 14-64% of the MLP moment's extra bytes per token over 56 presets, never a block's peak (tests/
    test_mem_flash_backward.py)."""
    tokens = st.micro_batch * st.seq_len / st.cp
    e = 4 if st.nf4_stream_outputs else st.bytes_per_value      # float32 gradients through float32 outputs
    k = spec.experts_per_token if spec.n_experts > 1 else 1
    return tokens * (e * (2 * spec.hidden / (st.tp if st.sp else 1) + st.mlp_bwd_ffn * k * spec.ffn_hidden / st.tp)
                     + _eager_score_grad_bytes(spec, st) / st.tp + _peft_cast_grad_bytes(spec, st, k))


def _peft_cast_grad_bytes(spec: ModelSpec, st: ActivationSetting, k: int) -> float:
    """Per token: under autocast PEFT casts an adapter's 16-bit input to its float32 adapter and autocast casts it
    back (`lora_input_cast`), so the adapter's input gradient passes through float32: at the down projection's
    backward a float32 ffn-wide gradient (hidden-wide where only other linears are adapted), besides the base's; in
    pure 16-bit training with LoRA dropout the dropout's backward makes it on the float32 copy (traced)."""
    casts = (st.lora_input_cast and not st.nf4_stream_outputs) or (st.lora_input_fp32 and st.adapter_dropout)
    if not (casts and st.frozen_base and st.adapted):
        return 0.0
    return 4.0 * (k * spec.ffn_hidden if "down" in st.adapted else spec.hidden) / st.tp


def _eager_score_grad_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """Per token: the s x s gradients a Hugging Face eager attention core (softmax(scores, dtype=float32).to(q.dtype),
    no attention dropout) holds at its softmax backward beyond what the block keeps: the float32 gradient of the
    softmax output (the cast's backward) and the scores' gradient in the scores' dtype, float32 where the additive
    mask is (it has the embedding output's dtype: float32 under a float32 residual stream), less the 16-bit
    probabilities the probs @ V backward freed before (traced: transformers eager attention under autocast)."""
    if st.flash or not st.hf_eager or has_dropout(spec):
        return 0.0
    e = st.bytes_per_value
    scores = 4 if residual_bytes(st) == 4 else e
    return spec.n_heads * st.seq_len / st.cp * (4 + scores - (e if e < 4 else 0))


def largest_block_matrix(spec: ModelSpec) -> float:
    """Elements of a block's largest linear weight with separate q, k, v, output and MLP matrices (one expert's
    for MoE): the attention projections (hidden x heads x head_dim) or an MLP matrix (hidden x ffn)."""
    return float(spec.hidden * max(spec.ffn_hidden, spec.n_heads * spec.head_dim))


# Loss kernels (TrainingConfig.loss_kernel / the stack's default): bytes per vocabulary entry and local token
# (kept for backward, transient at the loss boundary) and how many chunks the transient is split into. None:
# the activation dtype's bytes (e).
#   eager         F.cross_entropy on float32-upcast logits: the float32 log-softmax is kept (the logits are freed
#                 before backward); its backward makes the float32 gradient of the log-softmax and of the logits
#   eager-nocast  F.cross_entropy on the logits in their own dtype, no float32 upcast (pure 16-bit training loops,
#                 e.g. nn.CrossEntropyLoss on a bf16 model's logits): the same tensors as eager at the logits'
#                 bytes (e): the log-softmax kept, the gradients of the log-softmax and of the logits transient
#   chunked       the same as eager, one of LOSS_CHUNKS token chunks at a time (torchtune CEWithChunkedOutputLoss; LitGPT
#                 chunked_cross_entropy): every chunk's float32 log-softmax is still kept until its backward
#   fused         a fused kernel over 16-bit logits (flash-attn's Triton cross-entropy, llm-foundry): the 16-bit
#                 logits are kept (their log-sum-exp is per token) and the backward writes one 16-bit gradient
#   fused-linear  fused linear cross-entropy (Liger-Kernel, Cut Cross-Entropy): no logits outlive the kernel; it
#                 materialises one chunk's float32 logits and their gradient at a time
#   megatron      vocab-parallel cross-entropy: logits in the model dtype plus a float32 softmax kept, the
#                 gradient written in place
#   cce           Apple's Cut Cross-Entropy (cut_cross_entropy cce.py @ 1f3ebdb2, what Unsloth calls): logits exist
#                 only in on-chip tiles, forward and backward; it keeps a float32 log-sum-exp per token (CCE_KEPT) and
#                 its backward allocates the hidden states' gradient and, frozen or not, a gradient of the classifier
#                 matrix (cce_backward_kernel: de = zeros_like(e), dc = zeros_like(c)): cce_transient_bytes
LOSS_BYTES = {"eager": (4.0, 8.0, 1), "eager-nocast": (None, "2e", 1), "chunked": (4.0, 8.0, LOSS_CHUNKS), "fused": (None, None, 1),
              "fused-linear": (0.0, 8.0, LOSS_CHUNKS), "megatron": ("e+4", 0.0, 1), "cce": (0.0, 0.0, 1)}
CCE_KEPT = 4.0     # bytes per token: Cut Cross-Entropy's float32 log-sum-exp


def _loss_e(st: ActivationSetting, loss: str) -> float:
    """The bytes `e` of LOSS_BYTES: the activation dtype's, or for eager-nocast (the logits in their own dtype) 4
    where the output layer writes float32 logits (fp32_outputs: a float32 output layer without autocast)."""
    return 4.0 if loss == "eager-nocast" and st.fp32_outputs else st.bytes_per_value


def _loss_bytes(loss: str, e: int) -> tuple[float, float]:
    """(kept, transient) bytes per vocabulary entry and token of loss kernel `loss`."""
    kept, temp, chunks = LOSS_BYTES["eager" if loss == "torch" else loss]
    kept = e if kept is None else (e + 4.0 if kept == "e+4" else kept)
    temp = e if temp is None else (2.0 * e if temp == "2e" else temp)
    return kept, temp / chunks


def head_bytes(spec: ModelSpec, st: ActivationSetting, lm_head: bool = True, loss: str = "eager") -> float:
    """What the last pipeline stage keeps for backward: the final norm's input and output and the
    loss's saved tensor (vocabulary-parallel under TP; `loss` one of LOSS_BYTES, "torch" = eager)."""
    tokens = st.micro_batch * st.seq_len / st.cp
    rep = final_norm_bytes(spec, st)                                            # final norm in, its output
    held = 4.0 if st.logits_fp32_held and loss not in ("fused-linear", "cce") else 0.0   # the loop's float32 logits
    kept = _loss_bytes(loss, _loss_e(st, loss))[0]
    logits = (spec.vocab_size * (kept + held + final_softcap_bytes(spec, st, loss)) / st.tp
              if lm_head else 0.0)
    lse = CCE_KEPT if lm_head and loss == "cce" else 0.0
    return tokens * (rep + logits + lse)


def final_norm_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """Bytes per token the final norm keeps: its input (as the norm keeps it) and its output."""
    return spec.hidden * (_norm_input_bytes(st) + st.bytes_per_value + _norm_product_bytes(st)) / (st.tp if st.sp else 1)


def chunked_head_backward_bytes(spec: ModelSpec, st: ActivationSetting) -> tuple[float, float]:
    """(kept, transient) bytes at a trainable output layer's backward where the model applies it once per loss chunk
    and returns every chunk's logits (ActivationSetting.chunk_logits_held, torchtune chunked_output): autograd sums
    the LOSS_CHUNKS per-chunk weight gradients before the weight's AccumulateGrad runs, out of place (the running
    sum, the next chunk's gradient and their sum: three weight-sized gradients in the logits' dtype), after the
    loss's backward has made every chunk's logits gradient; at the second chunk's sum LOSS_CHUNKS - 2 of those still
    wait. Kept: the final norm's tensors (the float32 log-softmax is freed by then)."""
    tokens = st.micro_batch * st.seq_len / st.cp
    e = st.bytes_per_value
    waiting = tokens * spec.vocab_size * e * (LOSS_CHUNKS - 2) / LOSS_CHUNKS
    return tokens * final_norm_bytes(spec, st), (waiting + 3 * spec.vocab_size * spec.hidden * e) / st.tp


def final_softcap_bytes(spec: ModelSpec, st: ActivationSetting, loss: str = "eager") -> float:
    """Bytes per vocabulary entry and token that final-logit soft-capping keeps: tanh's output in the logits'
    dtype, alive until the loss's backward reaches it (0 without soft-capping, and under a fused linear
    cross-entropy, which materialises no logits)."""
    if not spec.final_softcap or loss in ("fused-linear", "cce"):
        return 0.0
    return 4.0 if st.fp32_outputs else float(st.bytes_per_value)


def loss_transient_bytes(spec: ModelSpec, st: ActivationSetting, lm_head: bool = True, loss: str = "eager") -> float:
    """Extra bytes at the loss/backward boundary on top of `head_bytes` (eager: the float32 gradient of
    the log-softmax and the float32 gradient of the logits it produces, 2 x 4 B per vocabulary entry and
    token; vocabulary-parallel under TP). For 128k vocabularies this is often THE peak."""
    if not lm_head:
        return 0.0
    tokens = st.micro_batch * st.seq_len / st.cp
    if loss == "cce":
        return cce_transient_bytes(spec, st)
    if loss == "chunked" and st.loss_chunk_tokens:
        return _token_chunk_transient(spec, st)
    if loss == "chunked" and st.chunk_logits_held:
        return tokens * spec.vocab_size * held_chunk_logits_transient(st) / st.tp
    return tokens * spec.vocab_size * _loss_bytes(loss, _loss_e(st, loss))[1] / st.tp


def held_chunk_logits_transient(st: ActivationSetting) -> float:
    """Bytes per vocabulary entry and token beyond the kept float32 log-softmax where the chunked loss holds every
    chunk's logits (ActivationSetting.chunk_logits_held): the larger of the loss forward's last chunk (every chunk's
    logits in their dtype and that chunk's float32 copy; float32 logits are not copied) and the loss backward's two
    float32 gradients of one chunk."""
    e = 4.0 if st.fp32_outputs else float(st.bytes_per_value)
    return max(8.0 / LOSS_CHUNKS, e + (4.0 / LOSS_CHUNKS if e < 4 else 0.0))


def _token_chunk_transient(spec: ModelSpec, st: ActivationSetting) -> float:
    """LitGPT's chunked loss (chunks of loss_chunk_tokens tokens of each sequence): the loss backward's two float32
    gradients of one chunk (the end of the next forward, where the loop holds float32 logits: memory._loss_temp)."""
    chunk = st.micro_batch * min(st.seq_len / st.cp, st.loss_chunk_tokens)
    return spec.vocab_size * 8.0 * chunk / st.tp


def cce_transient_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """Cut Cross-Entropy's backward allocations: the hidden states' gradient (tokens x hidden) and the classifier
    matrix's (vocabulary x hidden, allocated even for a frozen output layer), both in the 16-bit dtype."""
    tokens = st.micro_batch * st.seq_len / st.cp
    return st.bytes_per_value * spec.hidden * (tokens + spec.vocab_size / st.tp)


def quant_input_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """Inputs one layer's frozen 4-bit linears hold as autograd-function attributes (bitsandbytes < 0.43.2
    MatMul4Bit: ctx.tensors = (A, B)). Backward releases saved tensors, not ctx attributes, so these stay
    alive while the step's graph is referenced: the training loop's `loss` of step n-1 is replaced only
    after step n's forward, so at step n's loss boundary the previous step's inputs are alive too.
    Per layer: attention input, output-projection input, MLP input (shared with attention in single-norm
    parallel blocks), down-projection input (every routed expert)."""
    tokens = st.micro_batch * st.seq_len / st.cp
    k = spec.experts_per_token if spec.n_experts > 1 else 1
    dq = spec.n_heads * spec.head_dim
    rep = spec.hidden * (1 + (0 if _norms(spec) == 1 else k))          # column-parallel inputs (whole)
    split = dq + k * spec.ffn_hidden                                    # row-parallel inputs (split over tp)
    return tokens * st.bytes_per_value * (rep + split / st.tp)


def embedding_bytes(spec: ModelSpec, st: ActivationSetting) -> float:
    """Embedding-dropout mask (first pipeline stage)."""
    tokens = st.micro_batch * st.seq_len / st.cp
    return tokens * spec.hidden * (1 if has_dropout(spec) else 0) / (st.tp if st.sp else 1)


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                            selective: bool = False) -> float:
    """The published closed form (fp16, dropout, MHA, f = 4h), for tests and the validation."""
    attn = 0.0 if selective else 5 * a * s / (h * t)
    if sp:
        return s * b * h * (34 / t + attn)
    return s * b * h * (10 + 24 / t + attn)
