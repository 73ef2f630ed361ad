"""Training stacks as data: each stack's defaults (gpuwise/data/stacks/stacks.csv, one row per stack,
each with the place its defaults are read from). TrainingConfig.stack names the row; explicit flags
and job-spec fields override each default; every estimate states the row it used."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from gpuwise.data import data_path, read_commented_csv


@dataclass(frozen=True)
class Stack:
    """One stack's defaults (columns of stacks.csv)."""

    name: str
    efficiency: str          # op_efficiency.csv stack whose kernel efficiencies time it
    loss_kernel: str
    precision: str
    grads: str               # param | fp32-main-grad
    optimizer_impl: str      # fused | foreach | per-param
    norms: str               # fp32 | low
    attention: str
    recompute: str
    host: str                # HOSTS: eager (counted on gpuwise.nn) | transformers (on its models) | none (no floor)
    source: str
    checkpoints: str = "gpu"  # CHECKPOINTS: where a checkpointing recompute policy keeps each block's input
    short_loss_kernel: str = ""  # stacks.csv short_loss "kernel:N": the loss kernel of micro-batches of at most
    short_loss_tokens: int = 0   # N tokens; "" and 0 when the stack has none
    gpus: str = "many"       # GPU_COUNTS: one = the stack trains on one GPU only
    lora_targets: str = "q,v"  # LoRA target modules when the user names none (--lora-targets overrides)
    lora_dropout: float = 0.0  # LoRA dropout of the stack's recipes when the user gives none (--lora-dropout overrides)
    hf_models: bool = False    # it can run Hugging Face transformers models (their sdpa padding mask: --padding-mask)
    dora: str = "no"           # DORA_LAYERS: whose DoRA layer it runs (--dora), or no

    def loss_kernel_for(self, tokens: int) -> str:
        """The stack's loss kernel for a micro-batch of `tokens` tokens (short_loss_kernel up to its threshold)."""
        if self.short_loss_kernel and tokens <= self.short_loss_tokens:
            return self.short_loss_kernel
        return self.loss_kernel

    def describe(self) -> str:
        return (f"stack {self.name} (gpuwise/data/stacks/stacks.csv; each default overridden by its flag): "
                f"loss kernel {self.loss_kernel}, precision {self.precision}, gradients "
                f"{'in an fp32 main_grad buffer' if self.grads == 'fp32-main-grad' else 'in the parameters dtype'}, "
                f"optimizer implementation {self.optimizer_impl}, norms {self.norms}, attention {self.attention}, "
                f"recompute names: {self.recompute}"
                + (f"; loss kernel {self.short_loss_kernel} for micro-batches of at most "
                   f"{self.short_loss_tokens} tokens" if self.short_loss_kernel else "")
                + ("; checkpointed block inputs offloaded to host memory" if self.checkpoints == "host" else "")
                + ("; one GPU only" if self.gpus == "one" else "") + f"; LoRA targets {self.lora_targets} when none "
                f"are named, LoRA dropout {self.lora_dropout:g} when none is given" + f"; from {self.source}")


HOSTS = ("eager", "transformers", "none")   # stacks.csv column host (estimate/host_ops.py)
CHECKPOINTS = ("gpu", "host")                # stacks.csv column checkpoints
GPU_COUNTS = ("many", "one")                 # stacks.csv column gpus
DORA_LAYERS = ("peft", "torchtune", "no")    # stacks.csv column dora


@lru_cache(maxsize=1)
def _rows() -> dict[str, Stack]:
    from gpuwise.workload.training import LORA_MODULES   # training.py imports this module

    out = {}
    for r in read_commented_csv(data_path("stacks", "stacks.csv")):
        for col, allowed in (("host", HOSTS), ("checkpoints", CHECKPOINTS), ("gpus", GPU_COUNTS), ("dora", DORA_LAYERS)):
            if r[col] not in allowed:     # data, but a typo would silently act as another value
                raise ValueError(f"stacks.csv {r['stack']}: {col} {r[col]!r} is not one of {allowed}")
        if set(r["lora_targets"].split(",")) - set(LORA_MODULES) and r["lora_targets"] != "all-linear":
            raise ValueError(f"stacks.csv {r['stack']}: lora_targets {r['lora_targets']!r} names a module not in "
                             f"{LORA_MODULES}")
        if r["short_loss"] and not re.fullmatch(r"[a-z-]+:\d+", r["short_loss"]):
            raise ValueError(f"stacks.csv {r['stack']}: short_loss {r['short_loss']!r} is not kernel:tokens")
        short_kernel, _, short_tokens = r["short_loss"].partition(":")      # parsed here only: kernel:tokens
        out[r["stack"]] = Stack(r["stack"], r["efficiency"], r["loss_kernel"], r["precision"], r["grads"],
                                r["optimizer_impl"], r["norms"], r["attention"], r["recompute"], r["host"], r["source"],
                                r["checkpoints"], short_kernel, int(short_tokens or 0), r["gpus"], r["lora_targets"],
                                _dropout(r), r["hf_models"] == "yes", r["dora"])
    return out


def _dropout(r: dict) -> float:
    p = float(r["lora_dropout"])
    if not 0.0 <= p < 1.0:
        raise ValueError(f"stacks.csv {r['stack']}: lora_dropout {p} is not in [0, 1)")
    return p


def stack_names() -> tuple[str, ...]:
    return tuple(_rows())


def stack_row(name: str) -> Stack:
    """The row of stack `name`; InputError naming the stacks otherwise."""
    rows = _rows()
    if name not in rows:
        from gpuwise.errors import InputError

        raise InputError("stack", name, "use one of " + ", ".join(rows))
    return rows[name]
