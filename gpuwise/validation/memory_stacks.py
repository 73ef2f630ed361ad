"""External measured memory rows per training stack (gpuwise/data/measured/), as ValidationRows of
gpuwise.validation.memory: what each row's run did, expressed as a TrainingConfig of that stack.

- torchao_optim_readme_benchmarks.csv (pytorch/ao README): the Llama2-7B torchtune rows give what an 8-bit
  AdamW saves against fused AdamW (batch and sequence unstated, so only the saving is compared).

- litgpt_config_hub_finetune.csv (LitGPT config hub): torch.cuda.max_memory_allocated()/1e9 of full, LoRA
  and QLoRA fine-tunes at 512 tokens, precision bf16-true (gpuwise bf16), LoRA targets from each YAML,
  bnb.nf4 = NF4 base; devices > 1: FSDP FULL_SHARD with every block checkpointed; compared with the
  estimate's allocated peak. Models without a gpuwise preset are not modelled (said per row).
"""

from __future__ import annotations

from gpuwise.errors import InputError
from gpuwise.workload.training import ParallelPlan, TrainingConfig

LITGPT_CSV = "litgpt_config_hub_finetune.csv"
# litgpt's lora_* switches as the config hub README's rows spell them -> gpuwise lora_targets
LITGPT_TARGETS = {"query+value": "q,v", "query+key+value+projection+mlp+head": "all-linear,head"}
# config-hub model names that are not a preset name. Mistral-7B-v0.2 has every weight shape and hyper-parameter of
# v0.1 (litgpt config.py) but a 32k context without sliding window, neither of which gpuwise models: the same spec
LITGPT_MODELS = {"tiny-llama": "tinyllama-1.1b", "mistral-7b-v0.2": "mistral-7b"}


def litgpt_config(r: dict[str, str], attn_softcap: bool = False) -> TrainingConfig:
    """The run of one LitGPT config-hub row. `attn_softcap`: the model soft-caps its attention logits (Gemma 2),
    which LitGPT computes eagerly (litgpt/model.py @ 00af8b0d CausalSelfAttention.scaled_dot_product_attention:
    "with softcapping we cannot use SDPA": q @ k.mT, tanh, float32 softmax cast back, @ v)."""
    devices = int(r["devices_in_config"])
    accum = max(1, int(r["global_batch_size"] or 0) // (int(r["micro_batch_size"]) * devices))
    return TrainingConfig(micro_batch=int(r["micro_batch_size"]), grad_accum=accum, seq_len=int(r["max_seq_length"]), precision="bf16",
                          stack="litgpt", lora_rank=int(r["lora_r"] or 0),
                          lora_targets=LITGPT_TARGETS.get(r["lora_targets"], "q,v"),
                          quantize="nf4" if r["quantize"] == "bnb.nf4" else None,
                          recompute="full" if devices > 1 else "none", flash_attention=not attn_softcap,
                          plan=ParallelPlan(dp=devices, zero=3 if devices > 1 else 0))


def litgpt_rows() -> list:
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.estimate.model_states import state_bytes
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.validation.memory import ValidationRow, read_measured
    from gpuwise.validation.memory_external import NO_PRESET_WHY
    from gpuwise.workload.models import load_model

    out = []
    for r in read_measured(LITGPT_CSV):
        label = f"{LITGPT_CSV} {r['model']} {r['method']} {r['machine']}"
        note = ("LitGPT config hub (max_memory_allocated / 1e9): bf16-true, 512 tokens, LoRA targets and micro-batch "
                "from the row's YAML; " + ("FSDP full shard + every block checkpointed" if int(r["devices_in_config"]) > 1
                                           else "one GPU, no activation checkpointing"))
        try:
            spec = load_model(LITGPT_MODELS.get(r["model"], r["model"]))
        except InputError:
            out.append(ValidationRow(label, "allocated peak", None, None, "GB", "not modelled",
                                     f"no gpuwise preset for {r['model']}" + NO_PRESET_WHY.get(r["model"], ""),
                                     stack="litgpt"))
            continue
        est = estimate_memory(spec, litgpt_config(r, spec.attn_softcap > 0))
        if spec.attn_softcap:
            note += "; soft-capped attention runs eagerly in LitGPT (s x s scores, tanh and float32 softmax kept)"
        if r["oom"]:
            gpu = get_gpu(r["machine"].split("x", 1)[1])
            out.append(ValidationRow(label, f"reported OOM on {gpu.name}", None, est.required / 1e9, "GB", "checked",
                                     note + f"; estimator says {'fits' if est.fits(gpu) else 'does not fit'}",
                                     passed=not est.fits(gpu), stack="litgpt"))
            continue
        measured = float(r["peak_memory_gb"])
        # a LitGPT full fine-tune (bf16-true, torch.optim.AdamW: the config hub's only full-fine-tune setting) keeps
        # bf16 weights, gradients and two moments after its first step: counted from the dtypes (model_states)
        sb = state_bytes("bf16", "adamw")
        per_param = sb.weights + sb.gradients + sb.optimizer
        states = per_param * est.params / int(r["devices_in_config"])     # FSDP shards them
        if r["method"] == "full" and measured * 1e9 < states:
            # a full fine-tune's bf16 weights, gradients and two AdamW moments all exist after its first optimizer
            # step, whatever else the run does: a reading below them is of another configuration (said, left out)
            out.append(ValidationRow(label, "allocated peak", measured, None, "GB", "not modelled",
                                     f"reading {measured:g} GB is below its own configuration's model states "
                                     f"({est.params:,} parameters x {per_param:g} B of bf16 weights, gradients and AdamW moments "
                                     f"over {r['devices_in_config']} GPU(s) = {states / 1e9:.2f} GB, LitGPT's model "
                                     "at the row's commit): not a run of this configuration", stack="litgpt"))
            continue
        out.append(ValidationRow(label, "allocated peak", measured, est.allocated / 1e9, "GB",
                                 "compared", note, stack="litgpt", lengths="n/a"))
    return out


TORCHAO_CSV = "torchao_optim_readme_benchmarks.csv"
# torchao README optimizer names -> gpuwise optimizer names (the others have none)
TORCHAO_OPTIMIZERS = {"bnb 8-bit AdamW": "adamw8bit", "ao 8-bit AdamW": "adamw8bit"}


def torchao_rows() -> list:
    """The Llama2-7B rows: peak allocated saved by an 8-bit AdamW against fused AdamW (pure bf16, torchtune);
    the rest (no gpuwise preset or optimizer name) are not modelled, with the reason."""
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.validation.memory import ValidationRow, read_measured

    rows = read_measured(TORCHAO_CSV)
    base = {r["table"]: float(r["peak_memory_gb"]) for r in rows if r["optimizer_impl"] == "PyTorch AdamW (fused)"}
    cfg = TrainingConfig(precision="bf16", stack="torchtune")       # batch and sequence do not change the saving
    out = []
    for r in rows:
        label = f"{TORCHAO_CSV} {r['model']} {r['optimizer_impl']} {r['optimizer_offload']}"
        opt = TORCHAO_OPTIMIZERS.get(r["optimizer_impl"])
        if r["table"] != "llama2_7b_low_bit_adamw" or r["optimizer_impl"] == "PyTorch AdamW (fused)" or not opt:
            why = ("the reference of the savings below" if r["optimizer_impl"] == "PyTorch AdamW (fused)"
                   and "llama" in r["table"] else f"no gpuwise model or optimizer name for {r['model']} / "
                   f"{r['optimizer_impl']} ({r['optimizer_offload']} offload)")
            out.append(ValidationRow(label, "peak allocated", None, None, "GB", "not modelled", why,
                                     stack="torchtune" if "llama" in r["table"] else "pytorch"))
            continue
        saved = (estimate_memory("llama-2-7b", cfg).allocated
                 - estimate_memory("llama-2-7b", TrainingConfig(**{**cfg.__dict__, "optimizer": opt})).allocated)
        out.append(ValidationRow(label, "peak allocated saved vs fused AdamW", base[r["table"]] - float(r["peak_memory_gb"]),
                                 saved / 1e9, "GB", "compared", "torchtune full fine-tune, pure bf16 (torchao README); "
                                 "batch and sequence not stated: the saving is compared (optimizer state is alive in "
                                 "every phase)", stack="torchtune", lengths="n/a"))
    return out
