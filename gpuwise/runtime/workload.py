"""Job streams for `gpuwise run`: the gpuwise job-stream CSV/YAML of `simulate`, where
``application`` names one of the runtime's small real models and ``steps`` is the training amount.

======================  ==========================================================================
column                  meaning
======================  ==========================================================================
``name``, ``time``,     as in `gpuwise.workload.traces` (arrival in seconds from the start of the
``num_gpus``            run, GPUs the user asks for)
``application``         tiny-llama or tiny-resnet (`gpuwise.runtime.small_models`)
``steps``               training amount: optimizer steps at the job's ``batch_size`` (its
                        reference batch M0); larger batches need fewer (Pollux/AdaScale gain)
``batch_size``          the user's global batch M0
``min_batch``,          optional elastic batch range (default M0 .. 4 x M0)
``max_batch``
``gpu_type``            optional: only this GPU type
``lr``                  optional base learning rate at M0 (default 3e-3; AdamW)
``entrypoint``          instead of ``application``: your script and its arguments
                        (``train.py --hidden 64``, relative to the workload file), run on the
                        allocation's slots with the torch.distributed environment; elastic if it
                        uses `gpuwise.elastic`, else rigid (fixed batch, restarted on any change)
``model``, ``data``     instead of ``application``: a model (a preset such as tiny-llama, a
                        config.json or a cached Hugging Face id) and its text (a .txt, a JSONL of
                        ``{"text": ...}`` or a saved ``datasets`` folder), trained by the bundled
                        trainer (`gpuwise.elastic.trainer`); optional ``weights`` (a local model
                        folder) and ``tokenizer`` (a local tokenizer folder; default: UTF-8 bytes)
``lr_scaling``          script and model jobs: sqrt (default), linear, adascale or none
``max_local_batch``     script and model jobs: samples per slot, standing in for GPU memory (32)
======================  ==========================================================================
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, replace
from pathlib import Path

from gpuwise.errors import InputError
from gpuwise.workload.traces import TraceJob, Workload

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
COLUMNS = ("name", "time", "num_gpus", "application", "steps", "batch_size", "min_batch", "max_batch",
           "gpu_type", "lr", "entrypoint", "model", "data", "weights", "tokenizer", "lr_scaling", "max_local_batch")
REQUIRED = ("name", "time", "num_gpus", "steps", "batch_size")
DEFAULT_LR = 3e-3


@dataclass(frozen=True)
class RunJob(TraceJob):
    """A `TraceJob` the runtime trains for real."""

    steps: int = 0        # steps at batch_size to do
    lr: float = DEFAULT_LR
    seed: int = 0         # model init and generated data
    argv: tuple[str, ...] | None = None  # script and model jobs: the script (absolute) and its arguments
    elastic: bool = True                 # the script uses gpuwise.elastic (else: a rigid job)
    lr_scaling: str = "sqrt"
    max_local_batch: int | None = None   # script and model jobs: per-slot batch limit
    cwd: str | None = None               # where the script's relative paths start (the workload's folder)


def _field(r: dict, col: str, where: str, kind, optional: bool = False):
    from gpuwise.user_files import table_cell

    raw = r.get(col)
    v = table_cell(raw, kind, f"{where} column {col}", optional)
    if v is None:
        return None
    if kind is not str and v < 0 or (col in ("num_gpus", "steps", "batch_size", "lr") and v <= 0):
        raise InputError(f"{where} column {col}", raw, "give a positive number")
    return v


def jobs_from_rows(rows: list[dict], source: str, base: Path | None = None) -> Workload:
    """``base``: the folder script paths are relative to (default: the current one)."""
    from gpuwise.hardware.cluster import canonical_gpu
    from gpuwise.runtime.script_jobs import job_kind

    base = Path(base or Path.cwd()).resolve()
    jobs: list[RunJob] = []
    for i, r in enumerate(rows, start=1):
        where = f"{source} row {i}"
        extra = sorted(k for k in r if k not in COLUMNS)
        if extra:
            raise InputError(f"{where} column {extra[0]}", r[extra[0]], "unknown column; valid: " + ", ".join(COLUMNS))
        name = _field(r, "name", where, str).strip()
        if not SAFE_NAME.fullmatch(name):    # it names the job's folder of checkpoints and logs
            raise InputError(f"{where} column name", name, "use letters, digits, '.', '_' and '-' (at most 100, "
                             "starting with a letter or digit): the name is the job's artifact folder")
        if any(j.name == name for j in jobs):
            raise InputError(f"{where} column name", name, "give every job a unique name")
        kind = job_kind(r, where, base)
        kind["max_local_batch"] = _field(r, "max_local_batch", where, int, True) or kind.get("max_local_batch")
        gpu = r.get("gpu_type")
        jobs.append(RunJob(**kind,
            name=name, arrival_s=float(_field(r, "time", where, float)), num_gpus=_field(r, "num_gpus", where, int),
            batch_size=_field(r, "batch_size", where, int),
            gpu_type=canonical_gpu(str(gpu), f"{where} column gpu_type") if gpu not in (None, "") else None,
            min_batch=_field(r, "min_batch", where, int, True), max_batch=_field(r, "max_batch", where, int, True),
            row=i, steps=_field(r, "steps", where, int), lr=_field(r, "lr", where, float, True) or DEFAULT_LR,
            seed=i))
        if not jobs[-1].elastic:  # a rigid script trains at the batch it was given
            jobs[-1] = replace(jobs[-1], min_batch=jobs[-1].batch_size, max_batch=jobs[-1].batch_size)
        if jobs[-1].num_gpus > jobs[-1].batch_size // 2:
            raise InputError(f"{where} column num_gpus", jobs[-1].num_gpus,
                             "each slot needs at least 2 samples of the batch; ask for fewer GPUs")
    if not jobs:
        raise InputError(source, "no jobs", "the workload lists no jobs; add at least one")
    if any(b.arrival_s < a.arrival_s for a, b in zip(jobs, jobs[1:])):
        raise InputError(f"{source} column time", "unsorted", "sort the rows by arrival time")
    return Workload(tuple(jobs), source, "gpuwise-run")


def load_run_workload(path: str | Path) -> Workload:
    from gpuwise.user_files import load_yaml, read_text

    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        data = load_yaml(p, "--workload", "workload YAML")
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise InputError(str(p), type(data).__name__, "the file needs a top-level 'jobs:' list")
        return jobs_from_rows([{k: str(v) for k, v in j.items()} if isinstance(j, dict) else j
                               for j in data["jobs"]], str(p), p.parent)
    reader = csv.DictReader(io.StringIO(read_text(p, "--workload", "workload CSV"), newline=""))
    rows = [{k.strip(): (v or "").strip() for k, v in r.items() if k is not None} for r in reader]
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"{p} header", ",".join(reader.fieldnames or ()),
                         f"missing column {missing[0]}; `gpuwise run` needs " + ", ".join(REQUIRED))
    return jobs_from_rows(rows, str(p), p.parent)
