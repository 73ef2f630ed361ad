"""DoRA's memory (--dora, TrainingConfig.dora): what a weight-decomposed LoRA layer keeps and makes beyond LoRA's.

Read from PEFT 0.14 (lora/layer.py Linear.forward, lora/dora.py DoraLinearLayer.forward) and torchtune's DoRALinear
(modules/peft/dora.py), which run the same algorithm; gpuwise.nn's LoRALinear.dora runs it for the trace, and its saved
tensors equal PEFT's own layer's on CPU but for dropout's mask (CPU's float32 one against CUDA's bool one).
Per adapted linear (d_in x d_out):
- kept for backward, per token: the frozen output and the adapter's output, which the m / ||W + s B A|| products keep
  (d_out each: the step's 16-bit dtype, float32 for PEFT's adapters in pure 16-bit training, whose input PEFT casts to
  float32); with PEFT's dropout the frozen matmul runs again on the dropped input, whose 16-bit cast autocast keeps too
- kept per layer with PEFT's dropout: the re-run matmul's weight, which PEFT casts to the input's dtype (a 16-bit
  autocast copy, or a float32 copy in pure 16-bit training)
- made at once in every forward (and every re-run forward): an identity matrix (d_in x d_in, the adapters' input dtype,
  plus autocast's 16-bit cast of it), B A rebuilt through it, the frozen weight cast to that dtype, s B A, their sum,
  and autocast's float32 copy of the sum for the norm (d_in x d_out each)
"""

from __future__ import annotations

from gpuwise.estimate.lora import layer_adapter_shapes
from gpuwise.workload.model_spec import ModelSpec


def dora_layer_bytes(spec: ModelSpec, targets: str, tp: int, e: int, autocast: bool, peft_cast: bool,
                     rerun: bool, nf4: bool = False) -> tuple[float, float, float]:
    """(bytes kept per token, bytes of weight copies kept, bytes made at once by the largest adapted linear) of one
    layer's DoRA linears on one GPU. `e`: the step's activation bytes; `autocast`: under torch.autocast; `peft_cast`:
    PEFT's layers, which cast the input to their float32 dtype; `rerun`: PEFT's dropout re-runs the frozen matmul;
    `nf4`: a 4-bit base, dequantised anew for the norm."""
    shapes = layer_adapter_shapes(spec, targets, tp)
    fp32_in = peft_cast and not autocast and e < 4         # PEFT's float32 input in pure 16-bit training
    e_out = 4 if fp32_in else e                             # the adapter's output; the re-run frozen matmul's too
    e_base = e_out if rerun else e
    per_token = sum(d_out * (e_base + e_out) + (d_in * 2 if rerun and autocast else 0) for d_in, d_out in shapes)
    weights = sum(d_in * d_out * (2 if autocast else 4 if fp32_in else 0) for d_in, d_out in shapes) if rerun else 0.0
    ex = 4 if peft_cast else e                              # the adapters' input dtype: the identity's, the weight's
    el = 2 if autocast else ex                              # B A rebuilt (autocast: 16-bit)
    wc = ex if ex != e or nf4 else 0                        # the frozen weight cast (or dequantised) to that dtype
    ev = max(ex, el)                                        # W + s B A
    nc = 4 if autocast and ev < 4 else 0                    # autocast's float32 copy for the norm
    made = max((d_in * d_in * (ex + (2 if autocast else 0)) + d_in * d_out * (2 * el + wc + ev + nc)
                for d_in, d_out in shapes), default=0.0)
    return float(per_token), float(weights), float(made)


def dora_reruns_frozen(cfg) -> bool:
    """PEFT's DoRA under dropout runs each adapted linear's frozen matmul again, on the dropped input (lora/layer.py:
    base_result None); torchtune's reuses the frozen output (stacks.csv dora)."""
    from gpuwise.estimate.levers import reference_lora_dropout
    from gpuwise.workload.stacks import stack_row

    return cfg.dora and cfg.lora_rank > 0 and stack_row(cfg.stack).dora == "peft" and reference_lora_dropout(cfg) > 0


def dora_note(cfg) -> str:
    """The assumption line of --dora (empty without it)."""
    if not cfg.dora:
        return ""
    from gpuwise.workload.stacks import stack_row

    layer = stack_row(cfg.stack).dora
    return (f"DoRA ({'PEFT 0.14' if layer == 'peft' else 'torchtune'}'s layer; gpuwise.nn runs the same ops for the "
            "trace): each adapted linear keeps its frozen and adapter outputs for the magnitude's scaling, and every "
            "forward (and re-run forward) rebuilds B A through a d_in x d_in identity and the row norms of W + s B A, "
            "held at once for the largest adapted linear"
            + ("; with dropout the frozen matmul runs again on the dropped input and keeps its cast weight"
               if dora_reruns_frozen(cfg) else ""))
