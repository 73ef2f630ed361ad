"""Job spec: one training job described in YAML and validated with pydantic.

Schema (every field documented below; see examples/*.yaml)::

    name: llama-3.1-8b-pretrain
    model: llama-3.1-8b            # preset | path to a HF config.json | HF id owner/name | {name, params, ...}
    training:
      tokens: 1.0e11               # exactly one of: tokens | samples | epochs (+ dataset_samples) | steps (+ reference_batch)
      seq_len: 8192
      global_batch: 512            # sequences/samples per optimizer step, or [min, max] to let gpuwise choose
      precision: bf16-mixed
      optimizer: adamw
      recompute: selective
    parallelism: {tp: [1, 2, 4, 8], pp: [1, 2, 4], zero: [0, 1, 2, 3]}
    checkpoint: {size_gb: null, interval_minutes: null, restart_minutes: 10}
    deadline_hours: 240
    budget_usd: 500000
    constraints: {clouds: [aws, gcp], regions: [], gpus: [H100], max_gpus: 256, max_usd_per_hour: null, spot: true}

A bad field becomes ``InputError`` named by its YAML path, e.g. ``training.tokens: -5 is invalid; must be > 0``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import (Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from gpuwise.errors import InputError
from gpuwise.user_files import strict_base
from gpuwise.workload.model_spec import ModelSpec
from gpuwise.workload.stacks import stack_row
from gpuwise.workload.training import (LORA_DEFAULT, LOSS_KERNELS, OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS, RECOMPUTE_POLICIES, STACKS,
                                       recompute_policy)

LR_RULES = ("adascale", "linear", "sqrt", "none")
MAX_COUNT = 2**31 - 1     # batches and lengths: larger overflows the int arithmetic downstream
# Training fields that take one name from a fixed list
_CHOICES = {"precision": PRECISIONS, "optimizer": OPTIMIZERS, "lr_scaling": LR_RULES, "stack": STACKS,
            "loss_kernel": LOSS_KERNELS, "optimizer_impl": OPTIMIZER_IMPLS}


_Strict = strict_base()   # unknown keys are typos; NaN/inf are never a training amount, price or size


class ExplicitModel(_Strict):
    """A model given by numbers instead of a preset (e.g. a CNN)."""

    name: str = Field("custom", description="label shown in outputs")
    params: float = Field(gt=0, description="trainable parameters")
    flops_per_sample: float = Field(gt=0, description="forward FLOPs per sample (training = 3x with backward)")
    activation_bytes_per_sample: Optional[float] = Field(None, gt=0, description="activation memory per sample")
    sample_unit: str = Field("sample", description='"token" for language models, else "sample"/"image"')


class Training(_Strict):
    """How much to train and how each step looks."""

    tokens: Optional[float] = Field(None, gt=0, description="training tokens (language models)")
    samples: Optional[float] = Field(None, gt=0, description="training samples (sequences, images)")
    epochs: Optional[float] = Field(None, gt=0, description="passes over a dataset of dataset_samples")
    dataset_samples: Optional[float] = Field(None, gt=0, description="dataset size in samples (with epochs)")
    steps: Optional[float] = Field(None, gt=0, description="optimizer steps at reference_batch")
    reference_batch: Optional[int] = Field(None, gt=0, le=MAX_COUNT,
                                           description="global batch the steps were counted at")
    seq_len: int = Field(2048, gt=0, le=MAX_COUNT, description="tokens per sequence (ignored for non-token models)")
    global_batch: Union[int, list[int]] = Field(description="samples per optimizer step, or [min, max] range")
    micro_batch: Optional[int] = Field(None, gt=0, le=MAX_COUNT, description="per-GPU micro-batch (default: chosen)")
    precision: Optional[str] = Field(None, description="one of " + ", ".join(PRECISIONS)
                                     + " (default: the stack's, bf16-mixed for pytorch)")
    optimizer: str = Field("adamw", description="one of " + ", ".join(OPTIMIZERS))
    recompute: str = Field("none", description="activation recomputation: " + ", ".join(RECOMPUTE_POLICIES)
                           + " (selective = Megatron attention core; op, layer-K = torchtitan selective AC)")
    stack: str = Field("pytorch", description="software stack timing the step: " + ", ".join(STACKS)
                       + " (pytorch = PyTorch loops with FlashAttention kernels; megatron = Megatron-LM/NeMo + "
                       "Transformer Engine)")
    lora_rank: int = Field(0, ge=0, description="LoRA rank; 0 = full fine-tuning")
    lora_targets: Optional[str] = Field(None, description="LoRA target modules q,k,v,o,gate,up,down (comma-separated) "
                                        f"or all-linear (default: the stack's, {LORA_DEFAULT} for pytorch)")
    lora_dropout: Optional[float] = Field(None, ge=0.0, lt=1.0, description="LoRA dropout probability (default: the "
                                          "stack's recipes', 0 for pytorch)")
    loss_kernel: Optional[str] = Field(None, description="cross-entropy kernel: " + ", ".join(LOSS_KERNELS)
                                       + " (default: the stack's; chunked = --chunked-loss)")
    optimizer_impl: Optional[str] = Field(None, description="optimizer step kernel: " + ", ".join(OPTIMIZER_IMPLS)
                                          + " (default: the stack's)")
    cpu_offload: bool = Field(False, description="FSDP CPU offload of parameters, gradients and optimizer state "
                              "(needs ZeRO 3)")
    optimizer_in_backward: bool = Field(False, description="step each parameter in its gradient hook")
    activation_offload: bool = Field(False, description="saved activations offloaded to host memory")
    compile: bool = Field(False, description="torch.compile of each block")
    float8: bool = Field(False, description="torchao Float8 training (FP8 GEMMs, FP8 all-gather)")
    async_tp: bool = Field(False, description="asynchronous tensor parallelism (TP collectives overlapped)")
    padding_mask: bool = Field(False, description="batches carry a padding attention mask that reaches SDPA as a 4D "
                               "mask (Hugging Face sdpa with padded batches): every key tile computed, the mask kept")
    dora: bool = Field(False, description="DoRA (weight-decomposed LoRA) on the adapted linears (needs lora_rank)")
    quantize: Optional[Literal["nf4", "gptq-int4", "gptq-int8"]] = Field(
        None, description='quantised frozen base: "nf4" (QLoRA) or a GPTQ checkpoint, "gptq-int4" / "gptq-int8"')
    lr_scaling: str = Field("adascale", description="learning-rate scaling rule with batch: " + ", ".join(LR_RULES))
    noise_scale: Optional[float] = Field(None, gt=0, description="gradient noise scale (samples), if measured")

    @field_validator("precision", "optimizer", "lr_scaling", "stack", "loss_kernel", "optimizer_impl")
    @classmethod
    def _one_of(cls, v: str, info: ValidationInfo) -> str:
        allowed = _CHOICES[info.field_name]
        if v is not None and v not in allowed:
            raise ValueError("must be one of " + ", ".join(allowed))
        return v

    @field_validator("recompute")
    @classmethod
    def _policy(cls, v: str) -> str:
        try:
            recompute_policy(v)
        except InputError:
            raise ValueError("must be one of " + ", ".join(RECOMPUTE_POLICIES) + " (K a positive integer)") from None
        return v

    @field_validator("global_batch")
    @classmethod
    def _gb(cls, v: Union[int, list[int]]) -> Union[int, list[int]]:
        if isinstance(v, list):
            if len(v) != 2 or not (0 < v[0] <= v[1]):
                raise ValueError("must be a positive number or [min, max] with 0 < min <= max")
        elif v <= 0:
            raise ValueError("must be > 0")
        if max(v if isinstance(v, list) else [v]) > MAX_COUNT:
            raise ValueError(f"must be at most {MAX_COUNT:,} (2^31 - 1)")
        return v

    @model_validator(mode="after")
    def _amount(self) -> "Training":
        given = [k for k in ("tokens", "samples", "epochs", "steps") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give only one training amount, not {' and '.join(given)}")
        if self.epochs is not None and self.dataset_samples is None:
            raise ValueError("epochs needs dataset_samples (samples per epoch)")
        if self.steps is not None and self.reference_batch is None:
            raise ValueError("steps needs reference_batch (the global batch they were counted at)")
        return self

    def config_fields(self) -> dict:
        """TrainingConfig fields of these settings (precision: the stack's default when not given)."""
        return dict(precision=self.precision or stack_row(self.stack).precision, optimizer=self.optimizer,
                    recompute=self.recompute, lora_rank=self.lora_rank, quantize=self.quantize, stack=self.stack,
                    lora_targets=self.lora_targets or stack_row(self.stack).lora_targets,
                    lora_dropout=(stack_row(self.stack).lora_dropout if self.lora_dropout is None and self.lora_rank
                                  else self.lora_dropout),
                    loss_kernel=self.loss_kernel,
                    optimizer_impl=self.optimizer_impl, cpu_offload=self.cpu_offload,
                    optimizer_in_backward=self.optimizer_in_backward, activation_offload=self.activation_offload,
                    compile=self.compile, float8=self.float8, async_tp=self.async_tp,
                    padding_mask=self.padding_mask, dora=self.dora)

    @property
    def batch_range(self) -> tuple[int, int]:
        gb = self.global_batch
        return (gb[0], gb[1]) if isinstance(gb, list) else (gb, gb)

    def amount_samples(self, token_model: bool) -> Optional[float]:
        """Training amount in samples (sequences for token models); None if not given."""
        if self.tokens is not None:
            return self.tokens / self.seq_len if token_model else self.tokens
        if self.samples is not None:
            return self.samples
        if self.epochs is not None:
            return self.epochs * float(self.dataset_samples or 0)
        if self.steps is not None:
            return self.steps * float(self.reference_batch or 0)
        return None

    def amount_reference_batch(self) -> Optional[int]:
        """The batch at which the amount was stated (steps form), else the smallest allowed batch."""
        return self.reference_batch or self.batch_range[0]


class Parallelism(_Strict):
    """Parallel layouts the planner may use (lists of allowed degrees)."""

    tp: list[int] = Field([1], description="tensor-parallel sizes allowed")
    pp: list[int] = Field([1], description="pipeline stages allowed")
    cp: list[int] = Field([1], description="context-parallel sizes allowed (the sequence split over a ring of GPUs)")
    zero: list[int] = Field([0, 1, 2, 3], description="ZeRO/FSDP stages allowed")
    zero_shard: list[int] = Field([0], description="hybrid ZeRO-1 groups allowed (InternEvo zero1): optimizer "
                                  "states over K of the dp x cp ranks; 0 = all of them")
    gpus_per_node: Optional[int] = Field(None, gt=0, description="override GPUs per node of the instance")

    @field_validator("tp", "pp", "cp")
    @classmethod
    def _pos(cls, v: list[int]) -> list[int]:
        if not v or any(x < 1 for x in v):
            raise ValueError("must be a non-empty list of integers >= 1")
        return v

    @field_validator("zero_shard")
    @classmethod
    def _zero_shard(cls, v: list[int]) -> list[int]:
        if not v or any(x < 0 for x in v):
            raise ValueError("must be a non-empty list of group sizes >= 0 (0 = the whole dp x cp group)")
        return v

    @field_validator("zero")
    @classmethod
    def _zero(cls, v: list[int]) -> list[int]:
        if not v or any(x not in (0, 1, 2, 3) for x in v):
            raise ValueError("ZeRO stages are 0, 1, 2, 3")
        return v


class Checkpoint(_Strict):
    """Checkpoint and restart costs (used for spot preemptions and Young/Daly intervals)."""

    size_gb: Optional[float] = Field(None, gt=0, description="checkpoint size (default: weights+optimizer)")
    write_gbps: float = Field(1.0, gt=0, description="checkpoint write bandwidth, GB/s per node")
    interval_minutes: Optional[float] = Field(None, gt=0, description="fixed interval (default: Young/Daly)")
    restart_minutes: float = Field(10.0, ge=0, description="time to get a new node and resume")


class Constraints(_Strict):
    """Limits the planner applies when choosing offerings."""

    clouds: list[str] = Field(default_factory=list, description="allowed clouds (empty = any)")
    regions: list[str] = Field(default_factory=list, description="allowed regions (empty = any)")
    gpus: list[str] = Field(default_factory=list, description="allowed GPU types (empty = any)")
    max_gpus: Optional[int] = Field(None, gt=0, description="most GPUs in total")
    max_usd_per_hour: Optional[float] = Field(None, gt=0, description="hourly spending cap")
    spot: bool = Field(False, description="spot/preemptible instances allowed")


class JobSpec(_Strict):
    """One training job."""

    name: str = Field("job", description="label")
    model: Union[str, ExplicitModel] = Field(description="preset name, config.json path, Hugging Face id "
                                                         "(owner/name), or explicit numbers")
    training: Training
    parallelism: Parallelism = Field(default_factory=Parallelism)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    deadline_hours: Optional[float] = Field(None, gt=0, description="finish within this many hours")
    budget_usd: Optional[float] = Field(None, gt=0, description="spend at most this many dollars")
    constraints: Constraints = Field(default_factory=Constraints)
    source_path: Optional[str] = Field(None, description="file the spec came from (set by load_job)")
    # what `serve --backend ray` trains instead of the runtime's built-in model (issue 22); the
    # planner reads only `model`. Paths are relative to the spec's file (or the server's folder).
    entrypoint: Optional[str] = Field(None, description="your training script and its arguments (Ray backend)")
    data: Optional[str] = Field(None, description="text to train `model` on: .txt, JSONL or a saved datasets folder")
    weights: Optional[str] = Field(None, description="local model folder to start from (with data)")
    tokenizer: Optional[str] = Field(None, description="local tokenizer folder (with data; default UTF-8 bytes)")

    def model_spec(self) -> ModelSpec:
        """Resolve ``model`` (relative config paths are taken from the spec's folder)."""
        if isinstance(self.model, ExplicitModel):
            m = self.model
            return ModelSpec(name=m.name, family="explicit", explicit_params=int(m.params),
                             flops_per_sample=m.flops_per_sample,
                             activation_bytes_per_sample=m.activation_bytes_per_sample,
                             sample_unit=m.sample_unit, source="job spec")
        from gpuwise.workload.models import load_model

        ref = self.model
        if self.source_path and (ref.endswith(".json") or "/" in ref):
            cand = Path(self.source_path).parent / ref
            if cand.exists():
                ref = str(cand)
        try:
            return load_model(ref)
        except InputError as exc:
            raise InputError("model", self.model, exc.fix) from None


def _path(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not (isinstance(p, str) and p in ("ExplicitModel", "str", "int", "list[int]"))]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (("." if out else "") + p)
    return out or "job"


def _to_input_error(exc: ValidationError, data: Any) -> InputError:
    from gpuwise.errors import first_unknown_key

    if not (isinstance(data, dict) and isinstance(data.get("model"), dict)):
        unknown = first_unknown_key(exc, JobSpec)
        if unknown is not None:
            return unknown
    err = exc.errors()[0]
    loc = err.get("loc", ())
    # union errors on `model`: a mapping is an explicit model, report its own field
    if loc and loc[0] == "model":
        if isinstance(data.get("model"), dict):
            try:
                ExplicitModel.model_validate(data["model"])
            except ValidationError as inner:
                sub = _to_input_error(inner, data["model"])
                return InputError("model." + sub.field, sub.value, sub.fix)
        loc = ("model",)
    value = data
    for p in loc:
        if isinstance(value, dict) and p in value:
            value = value[p]
        elif isinstance(value, list) and isinstance(p, int) and p < len(value):
            value = value[p]
        else:
            value = err.get("input")
            break
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    for long, short in (("Input should be greater than or equal to", "must be >="),
                        ("Input should be greater than", "must be >"),
                        ("Input should be less than or equal to", "must be <="), ("Input should be less than", "must be <"),
                        ("Input should be", "must be")):
        msg = msg.replace(long, short)
    if err.get("type") == "extra_forbidden":
        msg = "unknown field; check the spelling (see gpuwise/workload/jobspec.py for the schema)"
    elif err.get("type") == "missing":
        msg, value = "required field is missing", None
    elif loc and loc[0] == "model" and not isinstance(data.get("model"), dict):
        msg = "give a preset name, a config.json path, or {name, params, flops_per_sample}"
    return InputError(_path(tuple(loc)), value, msg)


def parse_job(data: Any, source_path: str | None = None) -> JobSpec:
    """Validate a mapping (parsed YAML) into a JobSpec; errors name the YAML path."""
    if not isinstance(data, dict):
        raise InputError(source_path or "job", "(empty file)" if data is None else type(data).__name__, "a job spec is a YAML mapping (key: value)")
    try:
        spec = JobSpec.model_validate({**data, "source_path": source_path})
    except ValidationError as exc:
        raise _to_input_error(exc, data) from None
    if spec.training.cpu_offload and 3 not in spec.parallelism.zero:
        # FSDP CPU offload shards through ZeRO-3: without it no layout could run, and the search would
        # only say "does not fit"
        raise InputError("training.cpu_offload", True, f"FSDP CPU offload needs ZeRO 3; allow it in "
                         f"parallelism.zero (now {spec.parallelism.zero}) or drop cpu_offload")
    _check_cp(spec)
    par = spec.parallelism
    if any(par.zero_shard) and 1 not in par.zero:
        # a shard group is hybrid ZeRO-1: without stage 1 the search would never use it
        raise InputError("parallelism.zero_shard", par.zero_shard, f"hybrid ZeRO-1 groups need ZeRO 1; allow it in "
                         f"parallelism.zero (now {par.zero}) or give zero_shard: [0]")
    return spec


def _check_cp(spec: JobSpec) -> None:
    """Context parallelism splits each sequence over a ring of GPUs: every degree allowed must divide
    training.seq_len (a model without sequences, `space_from_jobspec`, allows only 1); else no layout could use it
    and the search would only say "does not fit"."""
    cp, seq = spec.parallelism.cp, spec.training.seq_len
    bad = [c for c in cp if seq % c]
    if bad:
        raise InputError("parallelism.cp", cp, f"{bad} do not divide training.seq_len {seq}; use divisors of it "
                         "(e.g. 1, 2, 4, 8)")


def load_job(path: str | Path) -> JobSpec:
    """Read and validate a YAML job spec."""
    from gpuwise.user_files import load_yaml

    return parse_job(load_yaml(path, "JOB", "job spec YAML (see examples/)"), str(Path(path)))
