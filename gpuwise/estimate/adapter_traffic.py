"""Memory traffic and kernels of unmerged LoRA adapters, counted on the layer code (data/calibration/adapter_traffic.csv).

An adapter's matmuls have rank r << width, so its time is set by the bytes its ops move, not by FLOPs. The rows are
counted, not fitted: `python -m gpuwise.validation.adapter_ops --write` runs gpuwise.nn's LoRA layer (the one the
trace and the GPU harness build) forward and backward under a byte-counting dispatch mode, minus its frozen linear
alone, at several shapes and two token counts, and solves for the bytes per token per input dimension, per output
dimension and per unit of rank, and for the bytes each call moves whatever its tokens (the adapters' weights and
gradients; DoRA's weight norms) per in^2, in x out, in x rank, out x rank, in and out. A row is keyed by what changes
those bytes:
  peft       PEFT's layers (estimate.stack_code.peft_adapters): float32 adapters whose input each casts to float32
             and whose output it casts back
  dropout    the reference layers run a LoRA dropout (levers.reference_lora_dropout > 0): an output and a 1-byte mask
  precision  fp32 | pure16 (16-bit weights, no autocast) | autocast (bf16-mixed, fp16-mixed, fp8)
  nf4        a 4-bit frozen base (PEFT's bitsandbytes layer casts only without autocast)
  fp32_stream  the QLoRA recipe's float32 rest (stack_code.kbit_fp32_stream): the layers' input is float32
  dora       no | reuse | rerun: DoRA (TrainingConfig.dora), the weight rebuilt through an identity matrix and its row
             norms every forward; rerun: PEFT's under dropout, which runs the frozen matmul again on the dropped input
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path
from gpuwise.workload.training import AUTOCAST_PRECISIONS, TrainingConfig

TRAFFIC_CSV = ("calibration", "adapter_traffic.csv")
KEY_COLUMNS = ("peft", "dropout", "precision", "nf4", "fp32_stream", "dora")
FIXED_TERMS = ("in2", "inout", "inr", "outr", "in", "out", "one")   # per call, whatever the tokens: in^2, in x out, ...
PER_TOKEN_COLUMNS = ("fwd_in", "fwd_out", "fwd_rank", "bwd_in", "bwd_out", "bwd_rank", "fwd_kernels", "bwd_kernels")
VALUE_COLUMNS = (*PER_TOKEN_COLUMNS, *(f"fwd_fix_{t}" for t in FIXED_TERMS), *(f"bwd_fix_{t}" for t in FIXED_TERMS))


@dataclass(frozen=True)
class AdapterTraffic:
    """What one adapter adds to its frozen linear, per token: bytes per input dimension, per output dimension and per
    unit of rank, forward and backward; and kernels per forward and per backward (not per token)."""

    fwd_in: float
    fwd_out: float
    fwd_rank: float
    bwd_in: float
    bwd_out: float
    bwd_rank: float
    fwd_kernels: float
    bwd_kernels: float
    fwd_fix: tuple[float, ...] = (0.0,) * len(FIXED_TERMS)    # bytes per call per FIXED_TERMS term, forward
    bwd_fix: tuple[float, ...] = (0.0,) * len(FIXED_TERMS)    # and backward

    def columns(self) -> dict[str, float]:
        """The row's values by VALUE_COLUMNS name."""
        flat = (self.fwd_in, self.fwd_out, self.fwd_rank, self.bwd_in, self.bwd_out, self.bwd_rank, self.fwd_kernels,
                self.bwd_kernels, *self.fwd_fix, *self.bwd_fix)
        return dict(zip(VALUE_COLUMNS, flat))

    def fixed_bytes(self, d_in: int, d_out: int, rank: int, forwards: float) -> float:
        """Bytes one call of an adapter on a d_in x d_out linear moves whatever its tokens, over `forwards` forward
        passes and one backward."""
        terms = (d_in * d_in, d_in * d_out, d_in * rank, d_out * rank, d_in, d_out, 1)
        return sum(t * (forwards * f + b) for t, f, b in zip(terms, self.fwd_fix, self.bwd_fix))

    def bytes_per_token(self, d_in: int, d_out: int, rank: int, forwards: float) -> float:
        """Bytes one token moves through an adapter on a d_in x d_out linear over `forwards` forward passes (1 plus
        the re-run share under recompute) and one backward."""
        fwd = self.fwd_in * d_in + self.fwd_out * d_out + self.fwd_rank * rank
        return forwards * fwd + self.bwd_in * d_in + self.bwd_out * d_out + self.bwd_rank * rank


def precision_class(precision: str) -> str:
    """fp32 | autocast (AUTOCAST_PRECISIONS: fp16 and bf16 move the same bytes) | pure16: what sets the dtypes an
    adapter's ops see."""
    return "fp32" if precision == "fp32" else "autocast" if precision in AUTOCAST_PRECISIONS else "pure16"


def adapter_key(cfg: TrainingConfig) -> tuple[bool, bool, str, bool, bool, str]:
    """The row of `cfg`'s adapters (module docstring)."""
    from gpuwise.estimate.levers import reference_lora_dropout
    from gpuwise.estimate.stack_code import kbit_fp32_stream, peft_adapters

    return (peft_adapters(cfg), reference_lora_dropout(cfg) > 0, precision_class(cfg.precision),
            cfg.quantize == "nf4", kbit_fp32_stream(cfg), dora_kind(cfg))


def dora_kind(cfg: TrainingConfig) -> str:
    """The key's dora column: no | reuse (the frozen output scaled) | rerun (estimate.dora.dora_reruns_frozen)."""
    from gpuwise.estimate.dora import dora_reruns_frozen

    return "no" if not cfg.dora else "rerun" if dora_reruns_frozen(cfg) else "reuse"


def key_of(row: dict) -> tuple[bool, bool, str, bool, bool, str]:
    """The key of a table row (KEY_COLUMNS as the CSV writes them: yes / no flags, precision and dora as text)."""
    return (row["peft"] == "yes", row["dropout"] == "yes", row["precision"], row["nf4"] == "yes",
            row["fp32_stream"] == "yes", row["dora"])


@lru_cache(maxsize=1)
def table() -> dict[tuple, AdapterTraffic]:
    lines = [ln for ln in data_path(*TRAFFIC_CSV).read_text().splitlines() if ln and not ln.startswith("#")]
    out = {}
    for r in csv.DictReader(lines):
        out[key_of(r)] = AdapterTraffic(*(float(r[c]) for c in PER_TOKEN_COLUMNS),
                                  tuple(float(r[f"fwd_fix_{t}"]) for t in FIXED_TERMS),
                                  tuple(float(r[f"bwd_fix_{t}"]) for t in FIXED_TERMS))
    return out


def counted_key(cfg: TrainingConfig) -> tuple[bool, bool, str, bool, bool, str]:
    """The counted row that times `cfg`'s adapters: its own key, or, for a layer the reference cannot build (a float32
    stream into 16-bit adapters: a QLoRA recipe's float32 rest under ZeRO-1/2, where PEFT's layers are not modelled),
    the same layer without the float32 stream."""
    peft, drop, prec, nf4, stream, dora = key = adapter_key(cfg)
    rows = table()
    for k in (key, (peft, drop, prec, nf4, False, dora)):
        if k in rows:
            return k
    raise KeyError(f"no counted adapter traffic for {key}: rerun python -m gpuwise.validation.adapter_ops --write")


def adapter_traffic(cfg: TrainingConfig) -> AdapterTraffic:
    """The counted row of `cfg`'s adapters (`counted_key`)."""
    return table()[counted_key(cfg)]


def traffic_note(cfg: TrainingConfig) -> str:
    """One assumption line: which layer code the adapters' time was counted on."""
    peft, drop, prec, nf4, stream, dora = key = counted_key(cfg)
    t = table()[key]
    what = ("PEFT's layers (float32 adapters, each casting its input to float32 and its output back)" if peft
            else "adapters in the layer's compute dtype")
    stand_in = "" if key == adapter_key(cfg) else "; the row of the same layer on a 16-bit stream stands in for it"
    return (f"LoRA adapters timed by the bytes their ops move ({what}{', with dropout' if drop else ''}"
            f"{', float32 stream' if stream else ''}{', DoRA' if dora != 'no' else ''}; counted on gpuwise.nn's LoRA layer, calibration/adapter_traffic.csv"
            f"{stand_in}): {t.fwd_in:g} + {t.bwd_in:g} B per token per input dimension and {t.fwd_out:g} + "
            f"{t.bwd_out:g} per output dimension (forward + backward), {t.fwd_kernels:g} + {t.bwd_kernels:g} kernels; "
            "counted on CPU, not yet timed on a GPU (gpu_measure --set adapters)"
            + ("; DoRA's weight norms per forward: " + f"{t.fwd_fix[0]:g} B per d_in^2 and {t.fwd_fix[1]:g} per "
               "d_in x d_out" + ("; the frozen matmuls PEFT re-runs under dropout timed as GEMMs too (their bytes "
                                 "are in the row)"
                                if dora == "rerun" else "") if dora != "no" else ""))
