"""Which submitted job specs the runtime can train, and the runtime job each one becomes.

The runtime's Ray workers train only its small CPU models (`gpuwise.runtime.small_models`:
tiny-llama, tiny-resnet). A job spec whose ``model`` names one of them trains that very model; any
other model (llama-3.1-8b, resnet50, a config.json of your own) is refused at submission with the
constraint and what would run -- nothing is silently swapped for a model of another size. A spec with
``entrypoint`` (the user's script) or ``data`` (``model`` trained on it by the bundled transformers
trainer) trains that instead of the built-in model's generated data (issue 22); ``model`` still sizes
the planner's prediction.

What the job becomes (`RunJob`): the reference batch M0 is the spec's ``reference_batch`` or its
smallest ``global_batch``; the batch range is the spec's ``global_batch`` (a number: fixed at that
batch); ``steps`` is the training amount in samples (sequences of the model's ``seq_len`` tokens
for tiny-llama) over M0, rounded up. A step at batch M counts as gain(M) steps at M0 (the runtime's
AdaScale progress), so progress is the fraction of the spec's samples (tokens) trained.
"""

from __future__ import annotations

import math

from gpuwise.errors import Infeasible, InputError
from gpuwise.hardware.cluster import ClusterSpec
from gpuwise.runtime.small_models import FOLDER, SmallModel, small_models
from gpuwise.runtime.workload import RunJob
from gpuwise.workload.jobspec import ExplicitModel, JobSpec


def runtime_model_of(spec: JobSpec) -> SmallModel | None:
    """The runtime model a spec names: its name, or the bundled config file of it (None: another model)."""
    from pathlib import Path

    models = small_models()
    if isinstance(spec.model, ExplicitModel):
        return None
    ref = spec.model.strip()
    p = Path(ref)
    if p.suffix == ".json" and p.parent.name == FOLDER and p.stem in models:
        return models[p.stem]
    return models.get(ref.lower())


def _too_big(spec: JobSpec, cluster: ClusterSpec) -> Infeasible:
    from gpuwise.workload.models import param_count

    models = small_models()
    what = spec.model if isinstance(spec.model, str) else spec.model.name
    try:
        size = f" ({param_count(spec.model_spec()) / 1e6:,.1f}M parameters)"
    except InputError:
        size = ""
    sizes = ", ".join(f"{n} ({_params(m):,} parameters)" for n, m in models.items())
    return Infeasible("model", what, f"{what}{size} is too large for the CPU slot workers of Ray cluster "
                      f"{cluster.name}, which train only the runtime's small models: {sizes}; submit "
                      f"model: {' or '.join(models)}, or serve --backend sim to run {what} in simulated time")


def _params(m: SmallModel) -> int:
    from gpuwise.workload.models import param_count

    return param_count(m.spec) if m.spec is not None else int(m.config["gpuwise"]["params"])


def runnable_spec(spec: JobSpec, cluster: ClusterSpec) -> JobSpec:
    """``spec`` as the runtime trains it, its ``model`` resolved to the bundled file (transformers) or
    to the counted numbers (CNNs) the planner reads; raises Infeasible (another model) or InputError."""
    from gpuwise.data import data_path

    m = runtime_model_of(spec)
    if m is None:
        raise _too_big(spec, cluster)
    user_training(spec)  # an entrypoint or data that is not there: refused now, not at launch
    tr = spec.training
    par = spec.parallelism
    if 1 not in par.tp or 1 not in par.pp or 1 not in par.cp or 0 not in par.zero_shard:
        raise InputError("parallelism", {"tp": par.tp, "pp": par.pp, "cp": par.cp, "zero_shard": par.zero_shard},
                         "the runtime trains data parallel only; allow tp: [1], pp: [1], cp: [1] and zero_shard: [0]")
    changes: dict = {}
    if m.kind == "lm":
        if "seq_len" in tr.model_fields_set and tr.seq_len != m.seq_len:
            raise InputError("training.seq_len", tr.seq_len, f"{m.name} trains {m.seq_len}-token sequences on the "
                             f"Ray backend; give seq_len: {m.seq_len} or leave it out")
        changes["training"] = tr.model_copy(update={"seq_len": m.seq_len})
        changes["model"] = str(data_path(FOLDER, f"{m.name}.json"))
    else:
        meta = m.config["gpuwise"]
        changes["model"] = ExplicitModel(name=m.name, params=float(meta["params"]),
                                         flops_per_sample=float(meta["flops_per_sample"]),
                                         activation_bytes_per_sample=float(meta["activation_bytes_per_sample"]),
                                         sample_unit="image")
    lo = tr.batch_range[0]
    slots = cluster.total_gpus
    if lo < 2:
        raise InputError("training.global_batch", tr.global_batch, "each slot trains at least 2 samples per step "
                         "(two half-batches for the gradient noise scale); give a batch of 2 or more")
    if lo > slots * m.max_local_batch:
        raise Infeasible("training.global_batch", tr.global_batch, f"{m.name} holds at most {m.max_local_batch} "
                         f"samples per slot and cluster {cluster.name} has {slots} slots; give a batch of at most "
                         f"{slots * m.max_local_batch}")
    return spec.model_copy(update=changes)


def run_job(spec: JobSpec, name: str, arrival_s: float, num_gpus: int, gpu_type: str | None,
            seed: int) -> RunJob:
    """The runtime job of a runnable spec (see the module docstring)."""
    m = runtime_model_of(spec) or small_models().get(spec.model_spec().name)  # CNNs: counted numbers, named
    if m is None:
        raise InputError("model", spec.model, "not a runtime model; pass the spec through runnable_spec first")
    tr = spec.training
    m0 = int(tr.amount_reference_batch())
    samples = tr.amount_samples(token_model=m.kind == "lm")
    lo, hi = tr.batch_range
    kind = {"application": m.name, **user_training(spec)}
    return RunJob(name=name, arrival_s=arrival_s, num_gpus=max(1, min(num_gpus, lo // 2)), batch_size=m0,
                  gpu_type=gpu_type, min_batch=lo, max_batch=hi, steps=max(1, math.ceil(samples / m0)), seed=seed,
                  **kind)


def user_training(spec: JobSpec) -> dict:
    """The RunJob fields of a spec's ``entrypoint`` or ``model`` + ``data`` (empty: the built-in model);
    checked as a workload row is (`gpuwise.runtime.script_jobs.job_kind`)."""
    from pathlib import Path

    from gpuwise.runtime.script_jobs import job_kind

    if not (spec.entrypoint or spec.data):
        return {}
    row = {"entrypoint": spec.entrypoint, "data": spec.data, "weights": spec.weights, "tokenizer": spec.tokenizer,
           "model": None if spec.entrypoint else spec.model}
    base = Path(spec.source_path).parent if spec.source_path else Path.cwd()
    return job_kind(row, "job spec", base)
