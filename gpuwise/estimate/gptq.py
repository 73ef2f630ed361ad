"""GPTQ frozen bases (--quantize gptq-int4 | gptq-int8): LoRA over a GPTQ checkpoint as Hugging Face + PEFT train it.

What the format and its training code are, read from the code (not fitted on anything):
- Storage (AutoGPTQ v0.5.1 nn_modules/qlinear): per linear layer an int32 `qweight` packing 32/bits codes along the
  input dimension, int32 `qzeros` packing one zero point per group of `group_size` inputs and output, fp16 `scales`
  per group and output, int32 `g_idx` per input (in / (in x out) elements: under 0.1%, not counted). Group size 128:
  the Qwen, Llama and TheBloke GPTQ checkpoints' quantize_config (group_size 128, desc_act false).
- Only the blocks' linear layers are quantised (optimum convert_model replaces the layers under the block pattern):
  embeddings, norms and the output layer stay in the checkpoint's fp16, and PEFT's prepare_model_for_kbit_training
  casts nothing to float32 for GPTQ.
- Training runs AutoGPTQ's `qlinear_cuda_old.QuantLinear` (exllama is inference-only and disabled for training; with
  desc_act false the CUDA "old" class). Above 128 rows of input (kernel_switch_threshold) its forward dequantises the
  whole matrix with PyTorch ops and calls torch.matmul, with no autograd Function of its own:
    codes = (qweight expanded over 32/bits shifts) >> shifts   int32, 4 B per weight
    codes = codes.to(int8 | int16)                               1 B (4-bit) / 2 B (8-bit)
    codes = codes & (2**bits - 1)
    weight = scales * (codes - zeros)                            fp16 (the zeros unpacked alike, per group)
    out = x @ weight
  so autograd keeps the fp16 weight (2 B per element) for the input's gradient (the frozen weight needs none, so x is
  not kept), until that layer's backward: every block's weights without recompute, the re-run block's under it.
"""

from __future__ import annotations

from dataclasses import dataclass

GPTQ_GROUP = 128          # inputs per scale / zero point (the common checkpoints' quantize_config)
INT32 = 4


@dataclass(frozen=True)
class GPTQFormat:
    name: str
    bits: int                 # 4 or 8
    group_size: int = GPTQ_GROUP

    @property
    def code_bytes(self) -> int:
        """Bytes per value of the unpacked codes: int8 for 4-bit, int16 for 8-bit (qlinear_cuda_old)."""
        return 1 if self.bits <= 4 else 2

    @property
    def bytes_per_weight(self) -> float:
        """Stored bytes per weight element: packed codes, packed zero points and fp16 scales per group."""
        return self.bits / 8 + (self.bits / 8 + 2) / self.group_size

    @property
    def dequant_peak_bytes(self) -> float:
        """Bytes per element one matrix's dequantisation holds at once beyond what it returns: the int32 shifted codes
        and their narrowing cast, alive together."""
        return INT32 + self.code_bytes

    @property
    def dequant_moved_bytes(self) -> float:
        """HBM bytes per weight element one dequantisation moves (each op reads its inputs and writes its output; the
        per-group zeros and scales are 1/group_size of it, not counted): the shift (packed codes in, int32 out), the
        cast, the mask, the zero-point subtraction and the fp16 scaling."""
        c = self.code_bytes
        return (self.bits / 8 + INT32) + (INT32 + c) + 2 * c + 2 * c + (c + 2)

    # kernels per matrix and dequantisation: shift, cast, mask, subtract, scale; the zeros' shift, cast, +1, mask
    dequant_kernels: int = 9


FORMATS = {f.name: f for f in (GPTQFormat("gptq-int4", 4), GPTQFormat("gptq-int8", 8))}
QUANTIZE_CHOICES = ("nf4", *FORMATS)
# the precisions AutoGPTQ's fp16 matmul runs under: fp16 weights under autocast to fp16, or to bf16 (which casts them)
GPTQ_PRECISIONS = ("fp16-mixed", "bf16-mixed")


def gptq_format(quantize: str | None) -> GPTQFormat | None:
    """The GPTQ format `quantize` names, or None (no quantisation, or NF4)."""
    return FORMATS.get(quantize or "")


def gptq_note(quantize: str | None) -> str:
    """The assumptions a GPTQ base adds (empty without one)."""
    f = gptq_format(quantize)
    if f is None:
        return ""
    return (f"GPTQ {f.bits}-bit base (AutoGPTQ qlinear_cuda_old, group size {f.group_size}): "
            f"{f.bytes_per_weight:.4f} B per block linear weight, embeddings, norms and output layer in fp16; each "
            f"matmul dequantises its whole weight with PyTorch ops ({f.dequant_peak_bytes:g} B per element at once) and "
            "autograd keeps the fp16 copy (2 B per element) until that layer's backward: every block's without "
            "recompute, the re-run block's with it")
