"""External measured memory rows of Hugging Face + PEFT runs (gpuwise/data/measured/), as ValidationRows of
gpuwise.validation.memory. No constant of the memory model is fitted on any of them.

- vertex_openllama7b_lora_qlora_a100_40g.csv (Vertex AI Model Garden report, OpenLLaMA-7B = the LLaMA-7B
  architecture): "peak GPU memory" (tool not stated) compared with the estimate's device total per GPU
  (per_gpu_gib), GB read as 1e9 bytes; its "fits" / OOM statements are checked against `fits`. Settings not in
  the report are the libraries' defaults, chosen before comparing: HF Trainer fp16 AMP over the fp16 base
  (fp16-mixed), no gradient checkpointing for LoRA (Trainer default), gradient checkpointing for QLoRA (PEFT
  prepare_model_for_kbit_training default), eager attention (transformers' LLaMA of 2023), PEFT's default
  LoRA targets for LLaMA (q_proj, v_proj), NF4 through PEFT's QLoRA recipe (prepare_model_for_kbit_training:
  embeddings, norms and lm_head in float32; data/stacks/model_code.csv hf-trainer row).
- unsloth_readme_max_context.csv (Unsloth README): the longest context of a 4-bit QLoRA run that fits in a VRAM
  size is a boundary point: the estimate must fit there and must not fit at +25% (MAX_CONTEXT_MARGIN); the
  README's OOM entries must not fit at 512 tokens. "Hugging Face + FA2" rows under the hf-trainer stack, Unsloth
  rows under the unsloth stack (defined from Unsloth's code, stacks.csv). The 8B contexts are exactly linear in
  VRAM (a line through the README's measurements, said in each row). Assumed: bf16 autocast, the PEFT
  QLoRA recipe (prepare_model_for_kbit_training: float32 embeddings, norms and lm_head, every block checkpointed;
  the README states none of these), flash attention, batch 1, all linear targets.
"""

from __future__ import annotations

from gpuwise.estimate.gptq import gptq_format
from gpuwise.estimate.memory import HEADROOM_FRACTION, estimate_memory
from gpuwise.estimate.overhead import GIB
from gpuwise.hardware.gpus import get_gpu
from gpuwise.workload.training import TrainingConfig

VERTEX_CSV = "vertex_openllama7b_lora_qlora_a100_40g.csv"
# the report's machine types: a2-highgpu-1g = one A100-40GB SXM; Google Cloud's V100 is the 16 GB SXM2
VERTEX_GPUS = {"A100 40GB": "A100-40GB-SXM", "V100": "V100-16GB-SXM2"}
# statements that restate another row approximately ("~28G", "~7G" in the key takeaways: rows 4 and 6)
VERTEX_RESTATED = {"1": "4", "2": "6"}
UNSLOTH_CSV = "unsloth_readme_max_context.csv"
MAX_CONTEXT_MARGIN = 0.25      # a context this much longer than the largest that fit must not fit (chosen a priori)
UNSLOTH_MODELS = {"Llama 3.1 (8B) Instruct": "llama-3.1-8b", "Llama 3.3 (70B) Instruct": "llama-3.1-70b"}


def _vertex_config(r: dict[str, str]) -> TrainingConfig:
    q = r["method"].startswith("QLoRA")
    return TrainingConfig(micro_batch=int(r["micro_batch_size"]), seq_len=int(r["max_seq_len"]),
                          precision="fp16-mixed", stack="hf-trainer", lora_rank=int(r["lora_rank"]),
                          quantize="nf4" if q else None, recompute="full" if q else "none", flash_attention=False)


def vertex_rows() -> list:
    from gpuwise.validation.memory import ValidationRow, read_measured

    out = []
    for r in read_measured(VERTEX_CSV):
        label = f"{VERTEX_CSV} #{r['statement_id']} {r['method'].split(' [')[0]} r{r['lora_rank']} batch " \
                f"{r['micro_batch_size']} x {r['max_seq_len']} {r['gpu'].split(' (')[0]}"
        kind = r["measurement"]
        if kind == "training throughput":
            out.append(ValidationRow(label, kind, float(r["value"]), None, r["unit"], "not modelled",
                                     "a throughput, not memory (see gpuwise validate throughput)", stack="hf-trainer"))
            continue
        if r["statement_id"] in VERTEX_RESTATED:
            out.append(ValidationRow(label, kind, None, None, "GB", "not modelled", "approximate restatement of row #"
                                     f"{VERTEX_RESTATED[r['statement_id']]} (counted once)", stack="hf-trainer"))
            continue
        est = estimate_memory("llama-7b", _vertex_config(r))
        note = ("HF PEFT: fp16-mixed, LoRA q,v, eager attention; " + ("QLoRA NF4 + PEFT prepare_model_for_kbit_"
                "training (float32 embeddings, norms and lm_head; gradient checkpointing)" if r["method"].startswith(
                    "QLoRA") else
                "no gradient checkpointing (Trainer default)") + "; not stated in the report")
        if kind == "peak GPU memory" and r["value"] != "OOM":
            out.append(ValidationRow(label, "peak GPU memory vs device total", float(r["value"]) * 1e9 / GIB,
                                     est.per_gpu_gib, "GiB", "compared", note + "; tool not stated: compared with "
                                     "per_gpu_gib (reserved + CUDA context)", stack="hf-trainer", lengths=""))
            continue       # the report does not say how its batches were padded (lengths "")
        gpu = get_gpu(next(v for k, v in VERTEX_GPUS.items() if r["gpu"].startswith(k)))
        oom = r["value"] == "OOM"
        out.append(ValidationRow(label, f"{'reported OOM' if oom else 'reported to fit'} on {gpu.name}", None,
                                 est.required / GIB, "GiB", "checked", note + "; " + est.fit_text(gpu),
                                 passed=est.fits(gpu) != oom, stack="hf-trainer"))
    return out


def _unsloth_config(model: str, seq: int, stack: str = "hf-trainer") -> TrainingConfig:
    """The README's QLoRA run (4-bit, r32 on all linear layers, batch 1) under `stack`: hf-trainer (its "Hugging
    Face + FA2" column) or unsloth (its README example's use_gradient_checkpointing="unsloth" and optim
    "adamw_8bit", README.md @ 000252c9; the table states neither)."""
    unsloth = stack == "unsloth"
    return TrainingConfig(micro_batch=1, seq_len=seq, precision="bf16-mixed", stack=stack, lora_rank=32,
                          lora_targets="all-linear", quantize="nf4", recompute="full",
                          optimizer="adamw8bit" if unsloth else "adamw")


def _fits_vram(model: str, seq: int, vram_gib: float, stack: str = "hf-trainer") -> bool:
    """The estimate's fit rule (required <= device less HEADROOM_FRACTION) for a VRAM size without a named GPU."""
    return estimate_memory(model, _unsloth_config(model, seq, stack)).required / GIB <= vram_gib * (1 - HEADROOM_FRACTION)


def max_context(model: str, vram_gib: float, hi: int = 1 << 20, stack: str = "hf-trainer") -> int:
    """The longest context (to 16 tokens) whose estimate fits in `vram_gib` (0: not even 16 tokens)."""
    lo = 16
    if not _fits_vram(model, lo, vram_gib, stack):
        return 0
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits_vram(model, mid, vram_gib, stack) else (lo, mid)
    return lo


_UNSLOTH_NOTE = ("Unsloth 4-bit QLoRA r32 all linear, batch 1, stack unsloth (defined from its code at b9fe2588 / "
                 "unsloth-zoo b09a9432, nothing fitted on these rows): Cut Cross-Entropy loss, checkpoints offloaded to "
                 "the host, fused LoRA MLP keeping gate and up, 16-bit embeddings, norms and lm_head, float32 adapters; "
                 "assumed from its README example (the table states neither): use_gradient_checkpointing=\"unsloth\", "
                 "optim adamw_8bit")
_HF_NOTE = ("HF + FA2 4-bit QLoRA r32 all linear, batch 1; assumed: bf16 autocast, PEFT prepare_model_for_kbit_"
            "training (float32 embeddings, norms and lm_head; every block checkpointed; not stated)")


def unsloth_rows() -> list:
    from gpuwise.validation.memory import ValidationRow, read_measured

    out = []
    for r in read_measured(UNSLOTH_CSV):
        label = f"{UNSLOTH_CSV} {r['model']} {r['framework']} {r['gpu_vram_gb']} GB"
        stack = "hf-trainer" if r["framework"].startswith("Hugging Face") else "unsloth"
        model, vram = UNSLOTH_MODELS[r["model"]], float(r["gpu_vram_gb"])
        pred = max_context(model, vram, stack=stack)
        note = (_HF_NOTE if stack == "hf-trainer" else _UNSLOTH_NOTE) + (
            f"; {vram:g} GiB less {HEADROOM_FRACTION:.0%} headroom; estimate's longest context {pred}"
            + ("; the README's 8B contexts are exactly linear in VRAM (derived from a line, not read at each size)"
               if model == "llama-3.1-8b" else ""))
        if r["oom"]:
            ok = not _fits_vram(model, 512, vram, stack)
            out.append(ValidationRow(label, "reported OOM (no context fits): 512 tokens must not fit", None, pred,
                                     "tokens", "checked", note, passed=ok, stack=stack))
            continue
        ctx = int(r["max_context_tokens_that_fit"])
        ok = _fits_vram(model, ctx, vram, stack) and not _fits_vram(model, int(ctx * (1 + MAX_CONTEXT_MARGIN)), vram,
                                                                     stack)
        out.append(ValidationRow(label, f"longest context that fits: fits, +{MAX_CONTEXT_MARGIN:.0%} does not",
                                 float(ctx), pred, "tokens", "checked", note, passed=ok, stack=stack))
    return out


# why a measured row's model has no preset (said in the row; a model not listed has no other reason than that)
_NOT_READ = ": its config.json hyper-parameters were not found in a stored public source to verify them against"
NO_PRESET_WHY = {
    "openbuddy-zephyr-7b-chat": _NOT_READ,
    "baichuan2-7b-chat": ": its remote code attends with SDPA in training only when xformers imports (else eager "
                         "attention keeping s x s scores) and the benchmark's environment does not list xformers; its "
                         "NormHead also keeps a normalized copy of the output weight for backward",
    "chatglm3-6b": ": model_type chatglm, GLM's own remote-code architecture, has no gpuwise reader and its code was "
                   "not read to verify how its structure maps onto one",
    "baichuan2-13b-chat": ": ALiBi positions, which gpuwise models for bloom and mpt only; how Baichuan2-13B's remote "
                          "code applies the ALiBi bias in training was not read",
}

SWIFT_CSV = "ms_swift_benchmark_a100.csv"
# a chat model has its base model's structure (the same config.json keys)
SWIFT_MODELS = {"qwen-7b-chat": "qwen-7b", "qwen-1_8b-chat": "qwen-1.8b", "qwen-14b-chat": "qwen-14b",
                "qwen-72b-chat": "qwen-72b", "yi-6b-chat": "yi-6b", "yi-34b-chat": "yi-34b"}
# swift's LoRA targets -> gpuwise lora_targets (swift's LoRATM default is q, k and v: Qwen's fused c_attn, q_proj/k_proj/
# v_proj for llama-type models such as Yi)
# the benchmark's quantization column -> --quantize (GPTQ: Qwen's Int4 / Int8 checkpoints, group size 128)
SWIFT_QUANTIZE = {"none": None, "int4 (bnb)": "nf4", "int4 (gptq)": "gptq-int4", "int8 (gptq)": "gptq-int8"}
SWIFT_TARGETS = {"DEFAULT": "q,k,v", "DEFAULT (c_attn)": "q,k,v", "ALL (all linear)": "all-linear"}


def _swift_config(r: dict[str, str]) -> TrainingConfig:
    lora = r["sft_type"] == "lora"
    fa, gc = r["flash_attn"] == "true", r["gradient_checkpointing"] == "true"
    # the source's own ablation (qwen-7b-chat LoRA, 2048 tokens) shows checkpointing takes effect with and
    # without flash attention: on/off 27.74/37.70 GiB with it, 27.71/57.67 GiB without
    recompute = "full" if gc else "none"
    quantize = SWIFT_QUANTIZE[r["quantization"]]
    # dtype AUTO picks a GPTQ checkpoint's fp16 (swift/llm/utils/argument.py select_dtype @ cfcb6726): fp16 autocast
    precision = "fp16-mixed" if gptq_format(quantize) else "bf16-mixed" if lora else "bf16"
    return TrainingConfig(micro_batch=int(r["micro_batch_size"]), seq_len=int(r["max_length"]),
                          grad_accum=int(r["grad_accum_steps"]), precision=precision,
                          stack="ms-swift", lora_rank=int(r["lora_rank"]) if lora else 0,
                          lora_targets=SWIFT_TARGETS.get(r["lora_target_modules"], "q,k,v"),
                          quantize=quantize, recompute=recompute,
                          flash_attention=fa)


def _swift_unmodelled(r: dict[str, str]) -> str:
    if r["model"] not in SWIFT_MODELS:
        return f"no gpuwise preset for {r['model']}" + NO_PRESET_WHY.get(r["model"], "")
    if int(r["num_gpus"]) > 1:
        return "two GPUs as a layer-wise device_map split in one process (naive model parallel), not a gpuwise layout"
    return ""


SWIFT_GPU = "A100-80GB-SXM"       # "A100", 80 GB implied by values up to 78.8 GiB
# a reserved peak this close to the device's memory is capped by it (the caching allocator frees its cache and
# retries before it fails): such a row says the run fit, not how much it needed
SWIFT_NEAR_CAPACITY = 1 - HEADROOM_FRACTION


# how each published run fed its data (see each CSV's header); not modelled
SWIFT_DEC_CSV = "ms_swift_benchmark_a100_2023_12.csv"     # the doc's first run (cfcb6726, 2023-12-14)
SWIFT_RUN_NOTES = {
    SWIFT_CSV: "run with swift's default truncation_strategy 'delete' (longer samples dropped, batches padded to "
               "their longest), so shapes vary per step up to max_length: the caching allocator's reserve keeps "
               "blocks of earlier shapes, which the estimate's allocator slack does not model",
    SWIFT_DEC_CSV: "run with truncation_strategy 'truncation_left' on 1000 samples (3234 +- 2548 tokens: longer ones "
                   "keep their last max_length tokens, so most batches fill max_length up to 2048; batches padded "
                   "to their longest)"}


# the Dec-2023 run truncates longer samples to max_length: at 2048 tokens and below most batches fill it
# (3234 +- 2548 tokens per sample); the Jan-2024 run drops them, so its batches are padded to lengths that vary
SWIFT_FIXED_UP_TO = {SWIFT_CSV: 0, SWIFT_DEC_CSV: 2048}


def swift_lengths(name: str, max_length: int) -> str:
    """How a row's batches vary in length (ValidationRow.lengths)."""
    return "fixed" if max_length <= SWIFT_FIXED_UP_TO[name] else "varying"


def _swift_key(r: dict[str, str]) -> tuple:
    """A row's configuration and reading (the qwen-7b-chat LoRA baseline is repeated in several sections)."""
    return tuple(v for k, v in r.items() if k not in ("section", "notes", "source", "trainable_params_M",
                                                       "train_samples_per_s", "lora_target_modules"))


def ms_swift_rows(name: str = SWIFT_CSV) -> list:
    """ms-swift rows of one run (`name`: SWIFT_CSV or SWIFT_DEC_CSV): reserved peak per GPU vs the estimate's
    reserved (allocated + allocator slack); a repeated row is counted once; a reading at the device's capacity is
    checked against `fits`, an OOM reading against not fitting."""
    from gpuwise.validation.memory import ValidationRow, read_measured

    out, seen, gpu = [], set(), get_gpu(SWIFT_GPU)
    for r in read_measured(name):
        label = (f"{name} {r['model']} {r['sft_type']} {r['quantization']} len {r['max_length']} batch "
                 f"{r['micro_batch_size']} accum {r['grad_accum_steps']} FA {r['flash_attn']} GC "
                 f"{r['gradient_checkpointing']} r{r['lora_rank'] or '-'} {r['lora_target_modules'] or ''}").strip()
        why = _swift_unmodelled(r) or ("repeats an earlier row (same configuration and reading): counted once"
                                       if _swift_key(r) in seen else "")
        seen.add(_swift_key(r))
        measured = float(r["gpu_memory_gib_reserved_per_gpu_max"]) if r["gpu_memory_gib_reserved_per_gpu_max"] else None
        if why:
            out.append(ValidationRow(label, "peak reserved per GPU", measured, None, "GiB", "not modelled", why,
                                     stack="ms-swift"))
            continue
        cfg = _swift_config(r)
        est = estimate_memory(SWIFT_MODELS[r["model"]], cfg)
        base = ("fp16 autocast over the GPTQ checkpoint's fp16 (dtype AUTO)" if gptq_format(cfg.quantize)
                else "bf16 autocast over a bf16 base")
        note = ("HF Trainer + PEFT, " + (base + ", LoRA on q,k,v (swift's default: Qwen's "
                "fused c_attn, where gpuwise counts separate q/k/v adapters, or Yi's q/k/v_proj)" if cfg.lora_rank
                else "pure bf16 weights and AdamW states (swift keeps bf16 weights: the source's caveat, not verified)") + f"; recompute {cfg.recompute}"
                + ("; bnb NF4 base (bitsandbytes 0.41.3), not passed through prepare_model_for_kbit_training "
                   "(stack ms-swift)" if cfg.quantize == "nf4" else "")
                + ("; GPTQ base (AutoGPTQ 0.5.1, exllama off); nothing fitted on GPTQ rows"
                   if gptq_format(cfg.quantize) else "")
                + "; reserved = max_memory_reserved (reserved_gib); " + SWIFT_RUN_NOTES[name])
        if r["oom"]:
            out.append(ValidationRow(label, f"OOM on {gpu.name}: must not fit", None, est.required / GIB, "GiB",
                                     "checked", note + "; " + est.fit_text(gpu), passed=not est.fits(gpu),
                                     stack="ms-swift"))
            continue
        if measured >= SWIFT_NEAR_CAPACITY * gpu.total_gib:
            out.append(ValidationRow(label, f"ran on {gpu.name} (reserved {measured:.2f} GiB: at capacity)", measured,
                                     est.required / GIB, "GiB", "checked", note + "; " + est.fit_text(gpu),
                                     passed=est.fits(gpu), stack="ms-swift"))
            continue
        out.append(ValidationRow(label, "peak reserved per GPU", measured, est.reserved / GIB, "GiB", "compared", note,
                                 stack="ms-swift", lengths=swift_lengths(name, int(r["max_length"]))))
    return out


ULT_CSV = "universal_llm_trainer_gpu_test.csv"
# Phi3-mini: the run's config (config/llm_phi3_*.yaml) loads microsoft/Phi-3-mini-128k-instruct, whose weights have
# the shapes of the 4k model (litgpt config.py: the same hyper-parameters but block size and rope scaling)
ULT_MODELS = {"Llama 3.1 8B": "llama-3.1-8b", "Llama 3 8B": "llama-3-8b", "Llama 2 13B": "llama-2-13b",
              "Gemma 7B": "gemma-7b", "Llama 3.1 70B": "llama-3.1-70b", "Phi3-mini (3.8B)": "phi-3-mini-4k-instruct",
              "Qwen 3 8B": "qwen3-8b", "Gemma 2 9B": "gemma-2-9b"}
# Gemma 2 under the run's transformers 4.49.0 (read from its wheel): attn_implementation null leaves the default,
# sdpa (modeling_utils._autoset_attn_implementation; 4.49's Gemma2PreTrainedModel no longer overrides
# _check_and_enable_sdpa to force eager, as 4.42 did), and integrations/sdpa_attention.py takes no softcap argument:
# the attention soft-capping is dropped, no s x s scores are kept. Gemma2ForCausalLM.forward soft-caps the logits
# (tanh kept). Gemma2Model always builds a 4D float mask for sdpa (the memory-efficient kernel keeps it; each
# sliding layer makes its own): b x s x s x 2 B = 0.25 GiB here, once plus one layer's under checkpointing, not
# modelled
ULT_GEMMA2_NOTE = ("; Gemma 2 (transformers 4.49.0): sdpa by default, whose path drops the attention soft-capping "
                   "(no s x s kept); the final-logit soft-capping keeps tanh's logits-sized output; the 4D masks "
                   "(0.25 GiB each) not modelled")
# its only memory readout (src/trainer/trainer.py line 303 @ aefdc4a4): the current reserve in GB after each micro-batch,
# the peak reserve once a step has run (the loop never empties the cache); the document's "GiB" are these GB
ULT_READOUT = ("its readout: torch.cuda.memory_reserved() / 1E9 printed as GB (src/trainer/trainer.py @ aefdc4a4; "
               "the document says GiB, its model sizes are GB), converted to GiB and compared with reserved_gib")
ULT_MASK_NOTE = ("; a padding mask: its --gpu_test (src/trainer/trainer.py, added 2025-08-11, before these rows were "
                 "published) replaces tokens and labels with random ones but keeps the dataset's padding attention mask "
                 "(qa_dataset.py pads to max_length), so transformers' sdpa builds a b x 1 x s x s mask (its H100 rows "
                 "predate --gpu_test and are taken as stated, without)")
ULT_GPUS = {"H100": "H100-80GB-SXM", "A100": "A100-80GB-SXM"}    # (the RTX Pro 6000 has no gpuwise row)
ULT_CARD_GB = {"H100": 80, "A100": 80, "Pro 6000": 96}       # the document's cards, nominal memory


def _capacity_bound(r: dict[str, str], rows: list, device_gib: float) -> bool:
    """The same run reserved more on a larger card of the document than this card's `device_gib` holds: here the
    allocator gave cache back to stay within the card (a failed cudaMalloc frees the cached blocks and retries), so
    this reading is a lower bound of the run's reserve, not the reserve."""
    key = ("model", "method", "fsdp", "num_gpus")
    return any(all(o[k] == r[k] for k in key) and o["peak_memory_gb"]
               and ULT_CARD_GB.get(o["gpu"], 0) > ULT_CARD_GB.get(r["gpu"], 0)
               and float(o["peak_memory_gb"]) * 1e9 / GIB > device_gib for o in rows)


def _ult_config(r: dict[str, str]) -> TrainingConfig:
    from gpuwise.workload.training import ParallelPlan

    lora = r["method"] in ("LoRA", "QLoRA")
    fsdp = r["fsdp"] == "True"
    # its loss: nn.CrossEntropyLoss on the HF model's logits, no autocast (amp_training False) and no labels passed
    # to the model (no ForCausalLMLoss upcast): 16-bit logits stay 16-bit; QLoRA's float32 output layer (PEFT
    # prepare_model_for_kbit_training) makes float32 logits: the stack's own loss kernel, eager-nocast (stacks.csv)
    return TrainingConfig(micro_batch=int(r["micro_batch_size"]), seq_len=int(r["seq_len"]),
                          grad_accum=int(r["grad_accum"]), precision="bf16", stack="universal-llm-trainer",
                          lora_rank=int(r["lora_r"]) if lora else 0, lora_targets="all-linear",
                          quantize="nf4" if r["method"] == "QLoRA" else None, recompute="full",
                          cpu_offload=fsdp and r["fsdp_cpu_offload"] == "True", padding_mask=r["gpu"] != "H100",
                          plan=ParallelPlan(dp=int(r["num_gpus"]), zero=3 if fsdp else 0))


def universal_trainer_rows() -> list:
    """universal-llm-trainer rows: "Peak Mem." (its code's torch.cuda.memory_reserved() / 1E9, GB) vs the reserved
    peak; readings at the card's capacity are checked against `fits`."""
    from gpuwise.validation.memory import ValidationRow, read_measured

    out = []
    rows = read_measured(ULT_CSV)
    for r in rows:
        label = f"{ULT_CSV} {r['gpu']} {r['model']} {r['method']}" + (" FSDP+offload" if r["fsdp"] == "True" else "")
        model = ULT_MODELS.get(r["model"])
        if model is None:
            out.append(ValidationRow(label, "peak memory", None, None, "GiB", "not modelled",
                                     f"no gpuwise preset for {r['model']}" + NO_PRESET_WHY.get(r["model"], ""),
                                     stack="universal-llm-trainer"))
            continue
        est = estimate_memory(model, _ult_config(r))
        note = ("HF transformers model, torch.optim.AdamW (foreach), bf16 weights without fp32 masters, every block "
                "checkpointed, sdpa (no s^2 kept), batch 2 x 8192 packed, its own nn.CrossEntropyLoss on the "
                "logits as they are (no float32 upcast: loss kernel eager-nocast; src/models/*.py @ aefdc4a4)" + ("; LoRA r8 all linear" if "LoRA" in
                r["method"] else "") + ("; NF4 + double quantisation; its code loads the 4-bit model with "
                "dtype=torch.float32 and calls PEFT prepare_model_for_kbit_training (src/models/llama3.py, "
                "src/trainer/build.py @ aefdc4a4): every other parameter in float32" if r["method"] == "QLoRA" else "")
                + ("; FSDP CPU offload of params, grads and optimizer state: torch FSDP1 (src/trainer/build.py: "
                   "FullyShardedDataParallel, CPUOffload(offload_params=True)), whose gradient shards stay on the "
                   "GPU until the backward ends (stack_code offload_grads_held); its loop calls backward on every micro-batch "
                   "without no_sync (src/trainer/trainer.py): gradients accumulate sharded"
                   if r["fsdp"] == "True" else "")
                + (ULT_GEMMA2_NOTE if model == "gemma-2-9b" else "")
                + (ULT_MASK_NOTE if r["gpu"] != "H100" else "") + "; " + ULT_READOUT)
        gpu = get_gpu(ULT_GPUS[r["gpu"]]) if r["gpu"] in ULT_GPUS else None
        if r["oom"]:
            out.append(ValidationRow(label, f"reported OOM on {gpu.name if gpu else r['gpu']}", None,
                                     est.required / GIB, "GiB", "checked" if gpu else "not modelled",
                                     note + ("; " + est.fit_text(gpu) if gpu else "; no gpuwise GPU row for it"),
                                     passed=(not est.fits(gpu)) if gpu else None, stack="universal-llm-trainer")
                       if gpu else ValidationRow(label, "reported OOM", None, None, "GiB", "not modelled",
                                                 f"no gpuwise GPU row for {r['gpu']}", stack="universal-llm-trainer"))
            continue
        measured = float(r["peak_memory_gb"]) * 1e9 / GIB
        bound = gpu is not None and _capacity_bound(r, rows, gpu.total_gib)
        if gpu is not None and (bound or measured >= (1 - HEADROOM_FRACTION) * gpu.total_gib):
            why = "more on a larger card of the document" if bound else "at capacity"
            out.append(ValidationRow(label, f"ran on {gpu.name} (reserve {measured:.1f} GiB: {why})", measured,
                                     est.required / GIB, "GiB", "checked", note + "; " + est.fit_text(gpu),
                                     passed=est.fits(gpu), stack="universal-llm-trainer"))
            continue
        out.append(ValidationRow(label, "peak reserved", measured, est.reserved / GIB, "GiB", "compared",
                                 note, stack="universal-llm-trainer", lengths="fixed"))      # packed to 8192 tokens
    return out
