"""Job streams for the cluster simulator.

Three formats, recognised by their header:

1. **Pollux workloads** (``gpuwise/data/pollux/workloads*/workload-N.csv``, OSDI'21 artifact):
   ``name,time,application,num_replicas,batch_size`` -- arrival second, one of the six profiled
   applications, the user's GPU count and global batch. Rows must be sorted by ``time``.
2. **Philly** (``gpuwise/data/pollux/traces/philly.csv``, Microsoft Philly via the Pollux artifact):
   ``timestamp,duration,num_gpus,gpu_time,cluster`` -- a job log (not in arrival order; we sort it
   by ``timestamp``); jobs are rigid: ``duration`` seconds on ``num_gpus`` GPUs.
3. **gpuwise job stream** (CSV, or YAML with a top-level ``jobs:`` list of the same fields):

   ======================  ==========================================================================
   column                  meaning
   ======================  ==========================================================================
   ``name``                unique job name
   ``time``                arrival, seconds from the start (rows sorted by time)
   ``num_gpus``            GPUs the user asks for (rigid policies give exactly this)
   ``application``         a Pollux application (bert, cifar10, deepspeech2, imagenet, ncf, yolov3)
                           -- or empty for a rigid job with ``duration_s`` or a ``jobspec`` job
   ``jobspec``             a job-spec YAML (gpuwise.workload.jobspec; path relative to this file):
                           speed from the job's goodput object (the planner's layout search, the spec's noise
                           scale and training amount); batch range from the spec
   ``batch_size``          the user's global batch (application/jobspec jobs; default: the smallest
                           allowed)
   ``duration_s``          run time on ``num_gpus`` GPUs (rigid jobs)
   ``gpu_type``            optional: only this GPU type (e.g. A100)
   ``min_batch``           optional: smallest global batch elastic policies may use
   ``max_batch``           optional: largest global batch elastic policies may use
   ======================  ==========================================================================
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from gpuwise.errors import InputError

POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
OWN_COLUMNS = ("name", "time", "num_gpus", "application", "batch_size", "duration_s", "gpu_type",
               "min_batch", "max_batch", "jobspec")


@dataclass(frozen=True)
class TraceJob:
    """One job of a stream, as submitted."""

    name: str
    arrival_s: float               # seconds from the start of the trace
    num_gpus: int                  # GPUs the user asked for
    application: str | None = None  # Pollux application (speed from its profile) or None (rigid)
    batch_size: int | None = None  # user's global batch (application jobs)
    duration_s: float | None = None  # run time on num_gpus GPUs (rigid jobs)
    gpu_type: str | None = None    # required GPU type (canonical) or None for any
    min_batch: int | None = None   # elastic batch range (None: the application's validated range)
    max_batch: int | None = None
    row: int = 0                   # 1-based data row in the source file (for error messages)
    jobspec: str | None = None     # path of a job-spec YAML (speed from its goodput object) or None
    # moldable jobs of a rental stream (issue 5, built in code by gpuwise.sim.cloud_cluster, not read
    # from files): duration_s is then the single-GPU work in seconds and the job runs at speedup(k) on k
    # GPUs. Policies that do not read it treat the job as rigid on num_gpus.
    speedup: Callable | None = None  # s(k), vectorised over numpy arrays, s(1) = 1
    job_type: str | None = None    # name of the job's type in the stream (what a rental policy keys on)

    @property
    def rigid(self) -> bool:
        """True for jobs that only run on exactly num_gpus GPUs for a known duration (and for
        moldable ``speedup`` jobs, as far as policies that ignore the speedup are concerned)."""
        return self.application is None and self.jobspec is None


@dataclass(frozen=True)
class Workload:
    jobs: tuple[TraceJob, ...]
    source: str
    format: str                    # "pollux" | "philly" | "gpuwise"
    notes: tuple[str, ...] = ()    # assumptions made while reading

    def __len__(self) -> int:
        return len(self.jobs)


def _where(path: str, row: int, col: str) -> str:
    return f"{path} row {row} column {col}"


@lru_cache(maxsize=1)
def _row_models() -> tuple[type, type, type]:
    """The pydantic rows of the three formats (built on first use; checks shared via user_files)."""
    from datetime import datetime
    from typing import Optional

    from pydantic import ConfigDict, Field, ValidationInfo, field_validator

    from gpuwise.hardware.cluster import canonical_gpu
    from gpuwise.user_files import known_name, strict_base, whole_number
    from gpuwise.workload.pollux_traces import APPLICATIONS

    class PolluxRow(strict_base()):
        model_config = ConfigDict(extra="ignore")   # the artifact's columns beyond these are not read
        name: Optional[str] = None
        time: float = Field(ge=0, description="arrival, seconds from the start")
        application: str = Field(description="one of the six profiled Pollux applications")
        num_replicas: int = Field(ge=1, description="the user's GPU count")
        batch_size: int = Field(ge=1, description="the user's global batch")

        _whole = field_validator("num_replicas", "batch_size", mode="before")(lambda v: whole_number(v))
        _app = field_validator("application", mode="before")(lambda v: known_name(v, APPLICATIONS))

    class PhillyRow(strict_base()):
        model_config = ConfigDict(extra="ignore")   # gpu_time, cluster: not used
        timestamp: float = Field(description="submission time, YYYY-MM-DD HH:MM:SS")
        duration: float = Field(gt=0, description="run time in seconds on num_gpus GPUs")
        num_gpus: int = Field(ge=1)

        _whole = field_validator("num_gpus", mode="before")(lambda v: whole_number(v))

        @field_validator("timestamp", mode="before")
        @classmethod
        def _time(cls, v):
            try:
                return datetime.fromisoformat(str(v)).timestamp()
            except ValueError:
                raise ValueError("use YYYY-MM-DD HH:MM:SS") from None

    class OwnRow(strict_base()):
        name: str = Field(min_length=1, description="unique job name")
        time: float = Field(ge=0, description="arrival, seconds from the start")
        num_gpus: int = Field(ge=1)
        application: Optional[str] = None
        batch_size: Optional[int] = Field(None, ge=1)
        duration_s: Optional[float] = Field(None, gt=0)
        gpu_type: Optional[str] = None
        max_batch: Optional[int] = Field(None, ge=1)     # before min_batch: its check reads max_batch
        min_batch: Optional[int] = Field(None, ge=1)
        jobspec: Optional[str] = None

        _whole = field_validator("num_gpus", "batch_size", "min_batch", "max_batch", mode="before")(
            lambda v: whole_number(v))
        _text = field_validator("name", "jobspec", mode="before")(lambda v: None if v is None else str(v).strip())
        _app = field_validator("application", mode="before")(lambda v: known_name(v, APPLICATIONS))

        @field_validator("gpu_type", mode="before")
        @classmethod
        def _gpu(cls, v):
            try:
                return canonical_gpu(str(v))
            except InputError as exc:
                raise ValueError(exc.fix) from None

        @field_validator("min_batch")
        @classmethod
        def _range(cls, v, info: ValidationInfo):
            top = info.data.get("max_batch")
            if v is not None and top is not None and v > top:
                raise ValueError(f"min_batch must be <= max_batch ({top})")
            return v

    return PolluxRow, PhillyRow, OwnRow


def _check_jobspec(raw: str | None, path: str, row: int) -> tuple[str | None, int | None]:
    """Resolve a job-spec path (relative to the workload file) and validate the spec now, so a bad
    spec fails before the simulation with the row named. Returns (path, the spec's smallest batch)."""
    if raw is None:
        return None, None
    from gpuwise.workload.jobspec import load_job

    p = Path(raw) if Path(raw).is_absolute() else Path(path).parent / raw
    if not p.is_file():
        raise InputError(_where(path, row, "jobspec"), raw, "give the path of a job-spec YAML (relative to "
                         "the workload file)")
    try:
        spec = load_job(p)
    except InputError as exc:
        raise InputError(_where(path, row, "jobspec"), raw, f"fix the spec: {exc}") from None
    if not spec.training.amount_samples(spec.model_spec().sample_unit == "token"):
        raise InputError(_where(path, row, "jobspec"), raw,
                         "the spec needs a training amount (tokens, samples, epochs or steps)")
    return str(p), int(spec.training.batch_range[0])


def _reference_batch(app: str) -> int:
    """A Pollux application's reference batch: the smallest validated one (its M0)."""
    from gpuwise.workload.pollux_traces import validated_batch_range

    return validated_batch_range(app)[0]


def _rows(model: type, rows: list, path: str) -> list:
    from gpuwise.user_files import validate_row

    out = []
    for i, r in enumerate(rows, start=1):
        if not isinstance(r, dict):
            raise InputError(f"{path} job {i}", r, "each job must be a mapping of the documented fields")
        out.append(validate_row(model, r, f"{path} row {i}"))
    return out


def _sorted(jobs: list[TraceJob], path: str) -> None:
    from gpuwise.user_files import check_sorted

    check_sorted([j.arrival_s for j in jobs], lambda row: _where(path, row, "time"))


def _pollux(rows: list[dict], path: str) -> Workload:
    jobs = [TraceJob(name=(r.name or f"job-{i}"), arrival_s=r.time, num_gpus=r.num_replicas,
                     application=r.application, batch_size=r.batch_size, row=i)
            for i, r in enumerate(_rows(_row_models()[0], rows, path), start=1)]
    _sorted(jobs, path)
    return Workload(tuple(jobs), path, "pollux")


def _philly(rows: list[dict], path: str) -> Workload:
    parsed = sorted((r.timestamp, i, r.duration, r.num_gpus)   # the log is ordered by job, not by submission
                    for i, r in enumerate(_rows(_row_models()[1], rows, path), start=1))
    t0 = parsed[0][0] if parsed else 0.0
    jobs = tuple(TraceJob(name=f"philly-{i}", arrival_s=t - t0, num_gpus=g, duration_s=d, row=i)
                 for t, i, d, g in parsed)
    return Workload(jobs, path, "philly",
                    ("Philly jobs are rigid: the logged duration on the logged GPU count, on any GPU type",
                     "Philly log sorted by submission timestamp; time 0 = first submission"))


def _own(rows: list[dict], path: str) -> Workload:
    jobs = []
    names: set[str] = set()
    for i, r in enumerate(_rows(_row_models()[2], rows, path), start=1):
        if r.name in names:
            raise InputError(_where(path, i, "name"), r.name, "give every job a unique name")
        names.add(r.name)
        spec, spec_batch = _check_jobspec(r.jobspec, path, i)
        if spec is not None and (r.application is not None or r.duration_s is not None):
            raise InputError(_where(path, i, "jobspec"), r.jobspec,
                             "a jobspec job takes no application or duration_s; leave them empty")
        if spec is None and r.application is None and r.duration_s is None:
            raise InputError(_where(path, i, "application"), "",
                             "give an application, a duration_s (rigid job) or a jobspec")
        jobs.append(TraceJob(
            name=r.name, arrival_s=r.time, num_gpus=r.num_gpus, application=r.application,
            batch_size=r.batch_size or (_reference_batch(r.application) if r.application else spec_batch),
            duration_s=r.duration_s, gpu_type=r.gpu_type, min_batch=r.min_batch, max_batch=r.max_batch,
            row=i, jobspec=spec))
    _sorted(jobs, path)
    return Workload(tuple(jobs), path, "gpuwise")


def load_workload(path: str | Path) -> Workload:
    """Read a job stream in any of the three formats (errors name the file, row and column);
    a stream without jobs is refused."""
    w = _load(path)
    if not w.jobs:
        raise InputError(w.source, "no jobs", "the workload lists no jobs; add at least one")
    return w


def _load(path: str | Path) -> Workload:
    from gpuwise.user_files import load_yaml, read_text

    p = Path(path)
    src = str(p)
    kind = "workload CSV/YAML"
    if p.suffix.lower() in (".yaml", ".yml"):
        data = load_yaml(p, "--workload", kind)
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            raise InputError(src, type(data).__name__, "the file needs a top-level 'jobs:' list")
        return _own(data["jobs"], src)
    # read_text names the file when it is missing, a folder or not text (binary)
    reader = csv.DictReader(io.StringIO(read_text(p, "--workload", kind), newline=""))
    header = tuple(h.strip() for h in (reader.fieldnames or ()))
    rows = list(reader)
    if not header:
        raise InputError(src, "empty", "the file has no header row")
    for r in rows:
        if None in r:  # more cells than header columns
            raise InputError(f"{src} row {rows.index(r) + 1}", r[None], "this row has too many cells")
    if set(POLLUX_COLUMNS) <= set(header):
        return _pollux(rows, src)
    if set(("timestamp", "duration", "num_gpus")) <= set(header):
        return _philly(rows, src)
    if set(("name", "time", "num_gpus")) <= set(header):
        return _own(rows, src)
    raise InputError(f"{src} header", ",".join(header),
                     "expected Pollux (name,time,application,num_replicas,batch_size), Philly "
                     "(timestamp,duration,num_gpus,...) or gpuwise (name,time,num_gpus,...) columns")


def check_fits(workload: Workload, gpus_by_type: dict[str, int]) -> None:
    """Refuse jobs that ask for more GPUs than the cluster has of one type (a job runs on a
    single GPU type, as in Frenzy and Sia) or for a type the cluster lacks."""
    largest = max(gpus_by_type.values(), default=0)
    for j in workload.jobs:
        if j.gpu_type and j.gpu_type not in gpus_by_type:
            raise InputError(_where(workload.source, j.row, "gpu_type"), j.gpu_type,
                             "the cluster has no such GPUs; valid: " + ", ".join(gpus_by_type))
        have = gpus_by_type[j.gpu_type] if j.gpu_type else largest
        if j.num_gpus > have:
            col = "num_replicas" if workload.format == "pollux" else "num_gpus"
            what = f"{j.gpu_type} GPUs" if j.gpu_type else "GPUs of one type (a job uses one type)"
            raise InputError(_where(workload.source, j.row, col), j.num_gpus,
                             f"the cluster has only {have} {what}; use a bigger --cluster or fewer GPUs")
