"""External measured memory rows per training stack (gpuwise/data/measured/), as ValidationRows of
gpuwise.validation.memory: what each row's run did, expressed as a TrainingConfig of that stack.

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


def litgpt_config(r: dict[str, str]) -> TrainingConfig:
    """The run of one LitGPT config-hub row."""
    devices = int(r["devices_in_config"])
    return TrainingConfig(micro_batch=int(r["micro_batch_size"]), seq_len=int(r["max_seq_length"]), precision="bf16",
                          stack="litgpt", lora_rank=int(r["lora_r"] or 0),
                          lora_targets=LITGPT_TARGETS.get(r["lora_targets"], "q,v"),
                          quantize="nf4" if r["quantize"] == "bnb.nf4" else None,
                          recompute="full" if devices > 1 else "none",
                          plan=ParallelPlan(dp=devices, zero=3 if devices > 1 else 0))


def litgpt_rows() -> list:
    from gpuwise.estimate.memory import estimate_memory
    from gpuwise.hardware.gpus import get_gpu
    from gpuwise.validation.memory import ValidationRow, _read
    from gpuwise.workload.models import load_model

    out = []
    for r in _read(LITGPT_CSV):
        label = f"{LITGPT_CSV} {r['model']} {r['method']} {r['machine']}"
        note = ("LitGPT config hub (max_memory_allocated / 1e9): bf16-true, 512 tokens, LoRA targets and micro-batch "
                "from the row's YAML; " + ("FSDP full shard + every block checkpointed" if int(r["devices_in_config"]) > 1
                                           else "one GPU, no activation checkpointing"))
        try:
            spec = load_model(r["model"])
        except InputError:
            out.append(ValidationRow(label, "allocated peak", None, None, "GB", "not modelled",
                                     f"no gpuwise preset for {r['model']}", stack="litgpt"))
            continue
        est = estimate_memory(spec, litgpt_config(r))
        if r["oom"]:
            gpu = get_gpu(r["machine"].split("x", 1)[1])
            out.append(ValidationRow(label, f"reported OOM on {gpu.name}", None, est.required / 1e9, "GB", "checked",
                                     note + f"; estimator says {'fits' if est.fits(gpu) else 'does not fit'}",
                                     passed=not est.fits(gpu), stack="litgpt"))
            continue
        out.append(ValidationRow(label, "allocated peak", float(r["peak_memory_gb"]), est.allocated / 1e9, "GB",
                                 "compared", note, stack="litgpt"))
    return out
