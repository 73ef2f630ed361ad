"""Host ops of Hugging Face `transformers` models, the code the hf-trainer and ms-swift stacks run.

The same counting as `gpuwise.validation.host_ops` (a TorchDispatchMode over one warm step at tiny widths, 1 and 2
layers, per precision), on `AutoModelForCausalLM.from_config` of the family's preset config.json: the loss is the
model's own (labels passed: ForCausalLMLoss, logits upcast to float32), recompute is transformers' gradient
checkpointing (non-reentrant), the frozen base is every weight frozen with the input embedding's output requiring
a gradient (PEFT's way with checkpointing). A LoRA adapter's ops, the 8-chunk loss's and the optimizer's are not
transformers' code: they come from the gpuwise.nn row of the same family and precision. Families whose config keys
are not written here keep only their gpuwise.nn row (said with the estimate).
"""

from __future__ import annotations

import json

from gpuwise.data import data_path

# families with a transformers row: llama-style config keys, and gpt2's
LLAMA_KEYS = ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi3", "mixtral")
FAMILIES = LLAMA_KEYS + ("gpt2",)


def _config(preset: str, layers: int):
    """The preset's transformers config at tiny widths (structure kept)."""
    from transformers import AutoConfig

    from gpuwise.validation.host_ops import TINY, tiny_kv_heads

    d = json.loads(data_path("models", f"{preset}.json").read_text())
    d.pop("gpuwise", None)
    if d["model_type"] == "gpt2":
        d.update(n_layer=layers, n_embd=TINY["hidden"], n_head=TINY["heads"], n_inner=TINY["ffn"],
                 vocab_size=TINY["vocab"], n_positions=TINY["positions"])
    else:
        heads = d["num_attention_heads"]
        d.update(num_hidden_layers=layers, hidden_size=TINY["hidden"], intermediate_size=TINY["ffn"],
                 num_attention_heads=TINY["heads"], head_dim=TINY["head_dim"], vocab_size=TINY["vocab"],
                 num_key_value_heads=tiny_kv_heads(heads, d.get("num_key_value_heads", heads)),
                 max_position_embeddings=TINY["positions"])
    d.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg = AutoConfig.for_model(**d)
    cfg._attn_implementation = "sdpa"
    return cfg


def count(preset: str, layers: int, precision: str, recompute: bool, frozen: bool) -> tuple[int, int]:
    """(forward + backward ops of one warm step, trainable tensors) of the preset's transformers model."""
    import torch
    from transformers import AutoModelForCausalLM

    from gpuwise.validation.host_ops import TINY

    from gpuwise.validation.host_ops import op_counter

    model = AutoModelForCausalLM.from_config(_config(preset, layers))
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    if recompute:     # transformers 5 renamed it (the old name warns); 4.x has only the old one
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if frozen:
        for p in model.parameters():
            p.requires_grad_(False)
        model.enable_input_require_grads()
    model.train()
    ids = torch.randint(0, TINY["vocab"], (1, 16))
    n = 0
    for _ in range(2):                       # count the second (warm) step
        c = op_counter()
        with c:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        model.zero_grad(set_to_none=True)
        n = c.n
    return n, sum(1 for p in model.parameters() if p.requires_grad)


def _split(preset: str, precision: str, recompute: bool, frozen: bool) -> tuple[int, int, int, int]:
    """(per-layer ops, fixed ops, per-layer tensors, fixed tensors) from the 1- and 2-layer counts."""
    (a, ta), (b, tb) = (count(preset, n, precision, recompute, frozen) for n in (1, 2))
    return b - a, a - (b - a), tb - ta, ta - (tb - ta)


def family_row(nn_row: dict) -> dict:
    """The transformers row of a family and precision; LoRA adapters, the chunked loss: from its gpuwise.nn row."""
    preset, precision = nn_row["preset"], nn_row["precision"]
    layer, head, tensors, tensors_fixed = _split(preset, precision, False, False)
    re_layer, re_head = _split(preset, precision, True, False)[:2]
    frozen_layer, frozen_head, _, _ = _split(preset, precision, False, True)
    frozen_re = _split(preset, precision, True, True)[0]
    return {**nn_row, "code": "transformers", "layer_ops": layer, "head_ops": head,
            "recompute_layer_ops": re_layer - layer, "recompute_head_ops": re_head - head, "lora_layer_ops": frozen_layer, "lora_head_ops": frozen_head,
            "lora_recompute_layer_ops": frozen_re - frozen_layer, "tensors_per_layer": tensors,
            "tensors_fixed": tensors_fixed}
