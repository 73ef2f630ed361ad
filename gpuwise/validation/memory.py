"""The memory estimator against every measured row bundled in gpuwise/data/measured/.

Every row of every file becomes one ValidationRow: compared (prediction, measurement, relative
error), checked (a qualitative outcome such as an out-of-memory report), or not modelled (with
the reason). Nothing is skipped silently.

Row sources and how they are read:
- megatron_korthikanti2022_via_calculon.csv: Korthikanti et al. 2022 Fig. 1 (per-GPU model-state
  and activation GiB of four GPT models on A100-80GB, Megatron-LM, fp16 with fp32 gradient buffer,
  vocabulary 51,200) and Fig. 7 (activation memory of each recompute mode as % of none), as encoded
  in Calculon; Table 5 rows are iteration times (not memory).
- hf_transformers_docs_bert_large_memory.csv: device totals (nvidia-smi) of bert-large-uncased
  sequence classification in fp32 with the HF Trainer (AdamW, eager attention), at the doc's
  sequence length 512.
- peft_readme_memory_a100_80gb.csv: HF PEFT README, A100-80GB (its example scripts: plain PyTorch /
  accelerate loops, so the pytorch stack); the README does not state batch,
  sequence length or dtype: the PEFT example scripts' settings are assumed (fp32, batch 8,
  64 tokens, LoRA rank 8), and GB is read as 1e9 bytes. The reading is torch.cuda.max_memory_allocated:
  every column pairs GPU with CPU memory, which the examples' TorchTracemalloc helper prints
  (examples/conditional_generation/peft_lora_seq2seq_accelerate_ds_zero3_offload.py @ v0.2.0: "GPU Total
  Peak Memory consumed during the train (max)" = max_memory_allocated after reset_max_memory_allocated,
  beside the process's peak RSS), so it is compared with the estimate's allocated peak.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, field

import numpy as np

from gpuwise.data import data_path
from gpuwise.estimate.memory import estimate_memory
from gpuwise.estimate.overhead import GIB, SLACK_GROUPS, Slack, slack_group, slack_terms
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.models import load_model
from gpuwise.workload.training import ParallelPlan, TrainingConfig

MEGATRON_VOCAB = 51200   # Megatron-LM GPT vocabulary (GPT-2 BPE padded to a multiple of 1024)
PEFT_SETTINGS = dict(micro_batch=8, seq_len=64, lora_rank=8, precision="fp32", optimizer="adamw")
PEFT_MODELS = {"bigscience/T0_3B": "t0-3b", "bigscience/mt0-xxl": "mt0-xxl", "bigscience/bloomz-7b1": "bloomz-7b1"}


@dataclass(frozen=True)
class ValidationRow:
    source: str                      # file and row label
    case: str                        # what was measured, in words
    measured: float | None           # in `unit`
    predicted: float | None
    unit: str
    status: str                      # "compared" | "checked" | "not modelled"
    note: str = ""                   # assumption or reason
    passed: bool | None = None       # for "checked" rows
    kind: str = "external"           # KINDS: external measurements are the headline; the others are consistency checks
    stack: str = "pytorch"           # training stack the row was measured (or derived) under
    lengths: str | None = None       # tokens per batch of a reserved peak or device total: "fixed" (packed, or most
    #                                  samples fill max_length), "varying" (padded to each batch's longest), "" (the
    #                                  source does not say), "n/a" (an allocated peak: the reserve is not in it)

    @property
    def error(self) -> float | None:
        """Relative error (predicted - measured) / measured, for compared rows."""
        if self.status != "compared" or not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured


# external:  measured in public runs that no constant of the memory model was fitted on (the headline)
# in-sample: measured rows a constant was fitted on (the allocator slack: allocator_reserved_vs_allocated.csv)
# formula:   outputs of a published formula, not measurements (Korthikanti et al. 2022 via Calculon)
# loso:      a fitted constant refitted without one source and scored on that source's rows (leave-one-source-out)
KINDS = ("external", "in-sample", "formula", "loso")
# which rows each constant of the memory model was fitted on (printed with every validation table)
FITTED_ON = ("allocator slack overhead.SLACK (one GPU in a plain loop / one GPU under DeepSpeed / several GPUs): "
             "the use=fit rows of measured/allocator_reserved_vs_allocated.csv (in-sample rows below) and the 28 one-GPU rows of "
             "gpuwise's H200 grid (measured/gpu/gpu_runs.csv: its reserved peaks are in-sample for `gpuwise validate "
             "gpu`; the held-out check set is not fitted on); its leave-one-source-out rows refit each fraction "
             "without each source repository (the H200 grid as one source); no other memory constant is "
             "fitted on a measured row (the rest are framework accounting: model_states.py, activations.py, and the "
             "stacks' own code read into data/stacks/model_code.csv)",)


def _summary(errors: list[float]) -> tuple[int, float | None, float | None]:
    return len(errors), (statistics.median(errors) if errors else None), (max(errors) if errors else None)


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[ValidationRow, ...]
    assumptions: tuple[str, ...] = field(default=())

    @property
    def errors(self) -> list[float]:
        """|error| of every compared row, consistency checks (formula, in-sample) included."""
        return [abs(r.error) for r in self.rows if r.error is not None]

    def headline(self) -> tuple[int, float | None, float | None]:
        """(rows, median, max |error|) over external measured rows only."""
        return _summary([abs(r.error) for r in self.rows if r.error is not None and r.kind == "external"])

    def by_stack(self, kind: str = "external") -> dict[str, tuple[int, float | None, float | None]]:
        """{stack: (rows, median, max |error|)} over compared rows of `kind`."""
        stacks = sorted({r.stack for r in self.rows if r.kind == kind})
        return {s: _summary([abs(r.error) for r in self.rows if r.error is not None and r.kind == kind
                             and r.stack == s]) for s in stacks}

    def by_source(self, kind: str = "external") -> dict[str, tuple[int, float | None, float | None]]:
        """{source file: (rows, median, max |error|)} over compared rows of `kind`."""
        files = sorted({r.source.split(" ", 1)[0] for r in self.rows if r.kind == kind and r.error is not None})
        return {f: _summary([abs(r.error) for r in self.rows if r.error is not None and r.kind == kind
                             and r.source.split(" ", 1)[0] == f]) for f in files}

    def by_lengths(self) -> dict[str, tuple[int, float | None, float | None]]:
        """{fixed | varying | not stated: (rows, median, max |error|)} over the external compared rows of reserved
        peaks or device totals (what the allocator's reserve is in): the fitted slack is a fixed-length step's."""
        rows = [r for r in self.rows if r.error is not None and r.kind == "external" and r.lengths != "n/a"]
        if any(r.lengths is None for r in rows):
            raise ValueError("an external compared row says nothing of its batch lengths: tag it (ValidationRow.lengths)")
        return {name: _summary([abs(r.error) for r in rows if r.lengths == key])
                for name, key in (("fixed", "fixed"), ("varying", "varying"), ("not stated", ""))}

    def checks(self, kind: str = "external") -> dict[str, tuple[int, int]]:
        """{source file: (checked rows, passed)} of `kind`."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.rows:
            if r.kind == kind and r.status == "checked":
                f = r.source.split(" ", 1)[0]
                n, ok = out.get(f, (0, 0))
                out[f] = (n + 1, ok + bool(r.passed))
        return out

    def consistency(self) -> tuple[int, float | None, float | None]:
        """(rows, median, max |error|) of the consistency checks (formula-derived and in-sample rows)."""
        return _summary([abs(r.error) for r in self.rows if r.error is not None and r.kind in ("in-sample", "formula")])

    def loso(self) -> tuple[int, float | None, float | None]:
        """(rows, median, max |error|) of the leave-one-source-out rows of the fitted allocator slack."""
        return _summary([abs(r.error) for r in self.rows if r.error is not None and r.kind == "loso"])

    @property
    def median_abs_error(self) -> float:
        return statistics.median(self.errors)

    @property
    def max_abs_error(self) -> float:
        return max(self.errors)


def read_measured(name: str) -> list[dict[str, str]]:
    """Rows of a measured CSV; lines starting with '#' are header comments (sources, column meanings)."""
    with open(data_path("measured", name), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def _megatron_spec(r: dict[str, str]) -> ModelSpec:
    h, a = int(r["hidden"]), int(r["heads"])
    return ModelSpec(name=r["model"], family="gpt2", n_layers=int(r["layers"]), hidden=h, n_heads=a, n_kv_heads=a,
                     head_dim=h // a, ffn_hidden=int(r["ffn"]), vocab_size=MEGATRON_VOCAB, max_seq_len=int(r["seq_len"]),
                     tied_embeddings=True, attn_bias=True, mlp_bias=True, learned_pos_emb=True,
                     source="Korthikanti et al. 2022 Table 3 configuration")


def _megatron_cfg(r: dict[str, str], mode: str) -> TrainingConfig:
    tp, pp, dp = int(r["tp"]), int(r["pp"]), int(r["dp"])
    mb = int(r["micro_batch"])
    accum = int(r["global_batch"]) // (mb * dp)
    sp = "seq" in mode
    recompute = "selective" if "selective" in mode else ("full" if mode == "full" else "none")
    return TrainingConfig(micro_batch=mb, seq_len=int(r["seq_len"]), grad_accum=accum, precision="fp16-mixed",
                          optimizer="adam", recompute=recompute, flash_attention=False,
                          plan=ParallelPlan(dp=dp, tp=tp, pp=pp, sp=sp))


def _megatron_rows() -> list[ValidationRow]:
    out = []
    src = "megatron_korthikanti2022_via_calculon.csv"
    for r in read_measured(src):
        label = f"{src} {r['source_item']} {r['model']} {r['recompute_mode']}"
        unit = r["unit"]
        if r["source_item"] == "tab5":
            out.append(ValidationRow(label, "iteration time", float(r["value"]), None, "s", "not modelled",
                                     "an iteration time, not memory (see gpuwise validate throughput)",
                                     kind="formula", stack="megatron"))
            continue
        spec = _megatron_spec(r)
        inter = int(r["pipeline_interleaving"])
        kw = dict(fp32_grads=True, interleave=inter, context=False)
        if r["source_item"] == "fig1":
            est = estimate_memory(spec, _megatron_cfg(r, r["recompute_mode"]), **kw)
            if unit.startswith("GiB params"):
                pred, case = (est.parameters + est.gradients + est.optimizer) / GIB, "model states per GPU"
                note = "estimator adds the embedding/output layer and biases that the figure leaves out"
            else:
                pred, case = est.activations / GIB, "activations per GPU"
                note = "peak pipeline stage; interleaved 1F1B factor 1+(p-1)/(pm)" + (
                    "; selective includes one layer's attention scores re-materialised in backward, which the "
                    "figure's stored activations omit" if r["recompute_mode"] != "none" else "")
            out.append(ValidationRow(label, case, float(r["value"]), pred, "GiB", "compared", note, kind="formula",
                                     stack="megatron"))
        else:  # fig7: activation memory as % of no recompute
            if r["recompute_mode"] == "none":
                out.append(ValidationRow(label, "activations vs no recompute", float(r["value"]), 100.0, "%", "checked",
                                         "the reference of the figure (100% by definition); not counted as an error",
                                         passed=True, kind="formula", stack="megatron"))
                continue
            base = estimate_memory(spec, _megatron_cfg(r, "none"), **kw).activations
            est = estimate_memory(spec, _megatron_cfg(r, r["recompute_mode"]), **kw).activations
            note = ("full recompute here includes the one-layer working set materialised in backward, which the "
                    "paper's 2sbhL formula omits") if r["recompute_mode"] == "full" else ""
            out.append(ValidationRow(label, "activations vs no recompute", float(r["value"]), 100 * est / base, "%",
                                     "compared", note, kind="formula", stack="megatron"))
    return out


def bert_rows(context: bool = True) -> list[tuple[dict[str, str], TrainingConfig]]:
    """The HF-docs BERT-large rows with the configuration each describes."""
    out = []
    for r in read_measured("hf_transformers_docs_bert_large_memory.csv"):
        cfg = TrainingConfig(micro_batch=int(r["per_device_train_batch_size"]), seq_len=512,
                             grad_accum=int(r["gradient_accumulation_steps"]), precision="fp32", optimizer="adamw",
                             flash_attention=False, stack="hf-trainer")
        out.append((r, cfg))
    return out


def _bert_rows() -> list[ValidationRow]:
    out = []
    spec = load_model("bert-large")
    for r, cfg in bert_rows():
        est = estimate_memory(spec, cfg, lm_head=False)
        out.append(ValidationRow(
            f"hf_transformers_docs_bert_large_memory.csv batch {cfg.micro_batch} x accum {cfg.grad_accum}",
            "device total (nvidia-smi)", float(r["gpu_memory_occupied_mb"]) / 1024, _bert_device_gib(est), "GiB",
            "compared", "fp32, AdamW, eager attention, seq 512 (doc setup), classification head, the doc's own "
            "measured 1343 MB context (CUDA without lazy loading); out-of-sample: the allocator-slack fraction "
            "is fitted on allocator_reserved_vs_allocated.csv", stack="hf-trainer", lengths="fixed"))
    return out


def _peft_rows() -> list[ValidationRow]:
    out = []
    for r in read_measured("peft_readme_memory_a100_80gb.csv"):
        label = f"peft_readme_memory_a100_80gb.csv {r['model']} {r['method']}"
        name = PEFT_MODELS[r["model"]]
        method = r["method"]
        if "DeepSpeed" in method:
            out.append(ValidationRow(label, "device memory", float(r["gpu_memory_gb"]) * 1e9 / GIB, None, "GiB",
                                     "not modelled", "DeepSpeed ZeRO-3 parameter offload (persistence and prefetch "
                                     "buffers not stated); only optimizer offload is modelled", stack="deepspeed"))
            continue
        lora = PEFT_SETTINGS["lora_rank"] if "LoRA" in method else 0
        cfg = TrainingConfig(micro_batch=PEFT_SETTINGS["micro_batch"], seq_len=PEFT_SETTINGS["seq_len"],
                             precision=PEFT_SETTINGS["precision"], optimizer=PEFT_SETTINGS["optimizer"], lora_rank=lora)
        est = estimate_memory(name, cfg)
        note = "README states no batch/length/dtype: fp32, batch 8, 64 tokens, LoRA r=8 assumed (PEFT examples)"
        if not r["gpu_memory_gb"].strip():
            fits = est.per_gpu_gib <= 80
            out.append(ValidationRow(label, "reported OOM on an 80 GB GPU", None, est.per_gpu_gib, "GiB", "checked",
                                     f"estimator says {'fits' if fits else 'does not fit'} in 80 GiB; " + note,
                                     passed=not fits, stack="pytorch"))
            continue
        out.append(ValidationRow(label, "allocated peak (TorchTracemalloc)", float(r["gpu_memory_gb"]) * 1e9 / GIB,
                                 est.allocated / GIB, "GiB", "compared", note + "; the examples' TorchTracemalloc "
                                 "reads torch.cuda.max_memory_allocated: compared with the allocated peak",
                                 stack="pytorch", lengths="n/a"))
    return out


def validate_memory() -> ValidationReport:
    """Every bundled measured row: compared, checked or not modelled (with the reason)."""
    from gpuwise.estimate.overhead import describe

    from gpuwise.validation.memory_external import (SWIFT_DEC_CSV, ms_swift_rows, universal_trainer_rows,
                                                     unsloth_rows, vertex_rows)
    from gpuwise.validation.memory_stacks import litgpt_rows, torchao_rows

    rows = (litgpt_rows() + torchao_rows() + vertex_rows() + unsloth_rows() + ms_swift_rows()
            + ms_swift_rows(SWIFT_DEC_CSV) + universal_trainer_rows()
            + _bert_rows() + _peft_rows()
            + _megatron_rows() + _allocator_rows() + _loso_rows())
    return ValidationReport(tuple(rows), (*FITTED_ON, describe(),
                                          "Megatron rows: fp16 + Adam with an fp32 gradient buffer (18 B/param), "
                                          f"vocabulary {MEGATRON_VOCAB}, no flash attention, allocated tensors only "
                                          "(no CUDA context)"))


def _bert_device_gib(est) -> float:
    """The HF doc's device total: reserved peak + the context the doc measured (no NCCL: one GPU)."""
    from gpuwise.estimate.overhead import EAGER_CONTEXT_MIB, MIB

    return (est.reserved + EAGER_CONTEXT_MIB * MIB) / GIB


ALLOCATOR_CSV = "allocator_reserved_vs_allocated.csv"


_UNIT_GIB = {"GiB": 1.0, "GB": 1e9 / GIB, "MiB": 1 / 1024, "MB": 1e6 / GIB, "bytes": 1 / GIB}
GRID_SOURCE = "gpuwise H200 grid"     # gpuwise/data/measured/gpu/gpu_runs.csv: one source in the fit


@dataclass(frozen=True)
class SlackRow:
    """One measured training-step peak the allocator slack is fitted on: allocated next to reserved."""
    source: str          # the repository of a public thread, or GRID_SOURCE
    label: str
    multi_gpu: bool
    stack: str           # the training code that ran the step (pytorch: a hand-written loop)
    allocated: float
    reserved: float
    unit: str
    metric: str
    setup: str

    @property
    def ratio(self) -> float:
        """measured reserved / allocated at the peak (same unit within a row)."""
        return self.reserved / self.allocated

    @property
    def unit_gib(self) -> float:
        """GiB per unit of the row's numbers (GB and MB read as decimal, as PyTorch's helpers print them)."""
        if self.unit.startswith("% of ") and self.unit.endswith(" GiB"):
            return float(self.unit[5:-4]) / 100
        return _UNIT_GIB[self.unit]

    def predicted(self, slack: Slack) -> float:
        """Reserved in the row's unit under `slack` (overhead.Slack) from its measured allocated peak."""
        return self.allocated * (1 + slack.fraction) + slack.gib / self.unit_gib

    @property
    def group(self) -> str:
        """The fitted slack that applies to this run (overhead.slack_group)."""
        return slack_group(self.multi_gpu, self.stack)


def slack_rows() -> list[SlackRow]:
    """The fit rows: the public `use=fit` rows and the H200 grid's one-GPU rows (measured allocated and reserved
    peaks of `gpu_runs.measured_rows`; the held-out check set is never read here)."""
    from gpuwise.validation.gpu_runs import SETS, measured_rows

    out = [_slack_row(r) for r in read_measured(ALLOCATOR_CSV) if r["use"] == "fit"]
    for r in measured_rows(SETS["grid"]):
        label = f"{r['model']} mb {r['micro_batch']} seq {r['seq_len']} {r['precision']} recompute {r['recompute']}"
        out.append(SlackRow(GRID_SOURCE, f"{label} {r['levers']}".strip() + f" ({r['device']})", False, "pytorch",
                            float(r["measured_allocated_gib"]), float(r["measured_reserved_gib"]), "GiB",
                            "peak allocated", f"plain PyTorch loop, {r['optimizer']}, torch {r['torch']}"))
    return out


def _slack_row(r: dict[str, str]) -> SlackRow:
    """A SlackRow of the public CSV's row `r`."""
    return SlackRow(_source_repo(r["source_url"]), f"{r['model']} ({r['source_url']})", r["multi_gpu"] == "yes",
                    r["stack"], float(r["allocated"]), float(r["reserved"]), r["unit"], r["metric"], r["setup"])


def calibrate_overhead(rows: list[SlackRow] | None = None) -> dict[str, Slack]:
    """The allocator slack of each group of `overhead.slack_group` that has rows, fitted on its measured training
    peaks (`slack_rows`): reserved = (1 + f) x allocated + c GiB, with f, c >= 0 minimising the summed squared
    relative error of reserved, sum(((1 + f) a_i + c) / r_i - 1)^2 (non-negative least squares in f and c; a_i, r_i
    in GiB)."""
    rows = slack_rows() if rows is None else rows
    return {g: _fit_slack(grp) for g in SLACK_GROUPS if (grp := [r for r in rows if r.group == g])}


def _fit_slack(rows: list[SlackRow]) -> Slack:
    from scipy.optimize import nnls

    a = np.array([r.allocated * r.unit_gib for r in rows])
    res = np.array([r.reserved * r.unit_gib for r in rows])
    # ((1 + f) a + c) / r - 1 = (f a + c) / r - (1 - a / r): non-negative least squares in f and c
    (f, c), _ = nnls(np.stack([a / res, 1 / res], axis=1), 1 - a / res)
    return Slack(float(f), float(c))


def _source_repo(url: str) -> str:
    """owner/name of a GitHub URL (the source a row was read from)."""
    parts = url.split("github.com/", 1)[-1].split("/")
    return "/".join(parts[:2])


def _loso_rows() -> list[ValidationRow]:
    """The allocator slack refitted without each source (a repository, or the H200 grid as one) and scored on
    that source's rows: the out-of-sample error of the only memory constants fitted on measured rows. A group
    left without rows falls back to the one-GPU plain-loop fraction (what a run of an unmeasured kind gets)."""
    fit = slack_rows()
    out = []
    for src in sorted({r.source for r in fit}):
        rest = [r for r in fit if r.source != src]
        fractions = calibrate_overhead(rest)
        for r in (r for r in fit if r.source == src):
            group = r.group if r.group in fractions else "one GPU"
            f = fractions[group]
            n = sum(1 for x in rest if x.group == group)
            out.append(ValidationRow(f"{ALLOCATOR_CSV if src != GRID_SOURCE else 'gpu_runs.csv'} {r.label} "
                                     f"(held out: {src})", f"peak reserved from {r.metric}, slack refitted without "
                                     f"{src}", r.reserved, r.predicted(f), r.unit, "compared",
                                     f"LEAVE-ONE-SOURCE-OUT: {group} slack {f.fraction:.1%} + {f.gib:.2f} GiB "
                                     f"fitted on the {n} {group} fit "
                                     f"rows of the other sources" + ("" if group == r.group else
                                                                    f" (no other {r.group} source)"),
                                     kind="loso"))
    return out


def _allocator_rows() -> list[ValidationRow]:
    """The public allocator rows: reserved predicted from the measured allocated peak with the estimator's slack.
    Training peaks are in-sample (the slack is fitted on them; the H200 grid's in-sample rows are `gpuwise validate
    gpu`'s); OOM rows are checks (fragmentation left after the allocator freed its cache must not exceed the
    modelled one-GPU slack, the smaller)."""
    out = []
    for r in read_measured(ALLOCATOR_CSV):
        row = _slack_row(r)
        label = f"{ALLOCATOR_CSV} {r['model']} ({r['source_url']})"
        predicted = row.predicted(slack_terms(row.multi_gpu, row.stack))
        if r["use"] == "oom":
            out.append(ValidationRow(label, "reserved at an out-of-memory error", row.reserved, predicted, r["unit"],
                                     "checked", "OOM message: unreleasable fragmentation is within the modelled "
                                     "slack; " + r["setup"], passed=row.reserved <= predicted, kind="in-sample"))
            continue
        out.append(ValidationRow(label, f"peak reserved from {r['metric']}", row.reserved, predicted, r["unit"],
                                 "compared", "IN-SAMPLE: the allocator slack is fitted on these rows; "
                                 + r["setup"], kind="in-sample"))
    return out


__all__ = ["ValidationRow", "ValidationReport", "validate_memory", "calibrate_overhead", "SlackRow", "slack_rows"]
