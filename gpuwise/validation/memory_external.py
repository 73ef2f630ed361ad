"""External measured memory rows of Hugging Face + PEFT runs (gpuwise/data/measured/), as ValidationRows of
gpuwise.validation.memory. No constant of the memory model is fitted on any of them.

- vertex_openllama7b_lora_qlora_a100_40g.csv (Vertex AI Model Garden report, OpenLLaMA-7B = the LLaMA-7B
  architecture): "peak GPU memory" (tool not stated) compared with the estimate's device total per GPU
  (per_gpu_gib), GB read as 1e9 bytes; its "fits" / OOM statements are checked against `fits`. Settings not in
  the report are the libraries' defaults, chosen before comparing: HF Trainer fp16 AMP over the fp16 base
  (fp16-mixed), no gradient checkpointing for LoRA (Trainer default), gradient checkpointing for QLoRA (PEFT
  prepare_model_for_kbit_training default), eager attention (transformers' LLaMA of 2023), PEFT's default
  LoRA targets for LLaMA (q_proj, v_proj), NF4 with the default stack's layout.
- unsloth_readme_max_context.csv (Unsloth README): the longest context of a "Hugging Face + FA2" 4-bit QLoRA run
  that fits in a VRAM size is a boundary point: the estimate must fit there and must not fit at +25%
  (MAX_CONTEXT_MARGIN); the README's OOM entries must not fit at 512 tokens. Assumed: bf16 autocast, gradient
  checkpointing of every block (the README states neither), flash attention, batch 1, all linear targets.
"""

from __future__ import annotations

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
    from gpuwise.validation.memory import ValidationRow, _read

    out = []
    for r in _read(VERTEX_CSV):
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
        note = ("HF PEFT: fp16-mixed, LoRA q,v, eager attention; " + ("QLoRA NF4 + gradient checkpointing (PEFT "
                "prepare_model_for_kbit_training default)" if r["method"].startswith("QLoRA") else
                "no gradient checkpointing (Trainer default)") + "; not stated in the report")
        if kind == "peak GPU memory" and r["value"] != "OOM":
            out.append(ValidationRow(label, "peak GPU memory vs device total", float(r["value"]) * 1e9 / GIB,
                                     est.per_gpu_gib, "GiB", "compared", note + "; tool not stated: compared with "
                                     "per_gpu_gib (reserved + CUDA context)", stack="hf-trainer"))
            continue
        gpu = get_gpu(next(v for k, v in VERTEX_GPUS.items() if r["gpu"].startswith(k)))
        oom = r["value"] == "OOM"
        out.append(ValidationRow(label, f"{'reported OOM' if oom else 'reported to fit'} on {gpu.name}", None,
                                 est.required / GIB, "GiB", "checked", note + "; " + est.fit_text(gpu),
                                 passed=est.fits(gpu) != oom, stack="hf-trainer"))
    return out


def _unsloth_config(model: str, seq: int) -> TrainingConfig:
    return TrainingConfig(micro_batch=1, seq_len=seq, precision="bf16-mixed", stack="hf-trainer", lora_rank=32,
                          lora_targets="all-linear", quantize="nf4", recompute="full")


def _fits_vram(model: str, seq: int, vram_gib: float) -> bool:
    """The estimate's fit rule (required <= device less HEADROOM_FRACTION) for a VRAM size without a named GPU."""
    return estimate_memory(model, _unsloth_config(model, seq)).required / GIB <= vram_gib * (1 - HEADROOM_FRACTION)


def max_context(model: str, vram_gib: float, hi: int = 1 << 20) -> int:
    """The longest context (to 16 tokens) whose estimate fits in `vram_gib` (0: not even 16 tokens)."""
    lo = 16
    if not _fits_vram(model, lo, vram_gib):
        return 0
    while hi - lo > 16:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits_vram(model, mid, vram_gib) else (lo, mid)
    return lo


def unsloth_rows() -> list:
    from gpuwise.validation.memory import ValidationRow, _read

    out = []
    for r in _read(UNSLOTH_CSV):
        label = f"{UNSLOTH_CSV} {r['model']} {r['framework']} {r['gpu_vram_gb']} GB"
        if not r["framework"].startswith("Hugging Face"):
            out.append(ValidationRow(label, "longest context that fits", None, None, "tokens", "not modelled",
                                     "Unsloth's own kernels and offloaded checkpointing are not a gpuwise stack",
                                     stack="unsloth"))
            continue
        model, vram = UNSLOTH_MODELS[r["model"]], float(r["gpu_vram_gb"])
        pred = max_context(model, vram)
        note = ("HF + FA2 4-bit QLoRA r32 all linear, batch 1; assumed: bf16 autocast, every block checkpointed "
                f"(not stated); {vram:g} GiB less {HEADROOM_FRACTION:.0%} headroom; estimate's longest context {pred}")
        if r["oom"]:
            ok = not _fits_vram(model, 512, vram)
            out.append(ValidationRow(label, "reported OOM (no context fits): 512 tokens must not fit", None, pred,
                                     "tokens", "checked", note, passed=ok, stack="hf-trainer"))
            continue
        ctx = int(r["max_context_tokens_that_fit"])
        ok = _fits_vram(model, ctx, vram) and not _fits_vram(model, int(ctx * (1 + MAX_CONTEXT_MARGIN)), vram)
        out.append(ValidationRow(label, f"longest context that fits: fits, +{MAX_CONTEXT_MARGIN:.0%} does not",
                                 float(ctx), pred, "tokens", "checked", note, passed=ok, stack="hf-trainer"))
    return out
