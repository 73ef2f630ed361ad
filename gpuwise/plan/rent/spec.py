"""YAML input of `gpuwise rent`: job types, optional budget, prices and an arrival trace.

    types:
      - name: a
        arrival_rate: 0.4          # jobs per hour
        mean_size: 1.0             # single-GPU hours of work (or give `sizes: [...]`)
        speedup: {amdahl: 0.8}     # or {power: 0.5}, {linear: true}, {table: {1: 1.0, 2: 1.9}}
        max_gpus: 64               # optional cap (required for linear speedups)
        size_distribution: exponential   # deterministic | {lognormal: sigma} | {pareto: alpha}
        price_per_gpu_hour: 2.5    # optional, for a USD budget
    budget: 2                      # optional: GPUs, or {usd_per_hour: 30}
    price_per_gpu_hour: 2.0        # optional default price

Validation errors name the YAML path of the bad field (e.g. types[1].speedup.amdahl).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Union

from gpuwise.errors import InputError
from gpuwise.plan.rent.jobtypes import SIZE_KINDS, JobType, SizeDistribution
from gpuwise.plan.rent.solver import Budget


@dataclass(frozen=True)
class RentSpec:
    types: tuple[JobType, ...]
    budget: Budget | None            # from the file (the CLI's --budget overrides it)
    trace: Path | None               # optional CSV of arrivals: arrival_time,type[,size]
    source: str                      # file name, for messages
    notes: tuple[str, ...] = ()      # assumptions made while reading (derived speedups and sizes)
    unpriced: tuple[str, ...] = ()   # types with no price_per_gpu_hour anywhere (USD budgets use $1/GPU-h)


@lru_cache(maxsize=1)
def _models():
    from pydantic import Field

    from gpuwise.user_files import strict_base

    class TypeModel(strict_base()):
        name: str = Field(min_length=1)
        arrival_rate: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
        mean_size: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
        sizes: Optional[list[float]] = Field(default=None, min_length=1)
        size_distribution: Union[str, dict[str, float]] = "exponential"
        speedup: dict[str, Any]
        max_gpus: Optional[float] = Field(default=None, ge=1, allow_inf_nan=False)
        price_per_gpu_hour: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)

    class SpecModel(strict_base()):
        types: list[TypeModel] = Field(min_length=1)
        budget: Union[float, str, dict[str, float], None] = None
        price_per_gpu_hour: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
        trace: Optional[str] = None

    return SpecModel


def _sizes(t, prefix: str) -> SizeDistribution:
    dist = t.size_distribution
    if t.sizes is not None:
        if any(not (x > 0 and math.isfinite(x)) for x in t.sizes):
            raise InputError(f"{prefix}.sizes", t.sizes, "sizes must be positive numbers")
        mean = sum(t.sizes) / len(t.sizes)
        if t.mean_size is not None and abs(t.mean_size - mean) > 1e-9 * mean:
            raise InputError(f"{prefix}.mean_size", t.mean_size,
                             f"disagrees with the mean of sizes ({mean:g}); give one or the other")
        return SizeDistribution("empirical", mean, samples=tuple(t.sizes))
    if t.mean_size is None:
        raise InputError(f"{prefix}.mean_size", None, "give mean_size (hours of single-GPU work) or a sizes sample")
    if isinstance(dist, str):
        kind, shape = dist.lower(), None
    else:
        if len(dist) != 1:
            raise InputError(f"{prefix}.size_distribution", dist, "give one of {lognormal: sigma} or {pareto: alpha}")
        (kind, shape), = dist.items()
        kind = kind.lower()
    if kind not in SIZE_KINDS or kind == "empirical":
        from gpuwise.errors import did_you_mean
        raise InputError(f"{prefix}.size_distribution", dist, did_you_mean(str(kind), SIZE_KINDS[:-1]))
    if kind in ("lognormal", "pareto") and shape is None:
        raise InputError(f"{prefix}.size_distribution", dist,
                         "lognormal needs its sigma ({lognormal: 1.5}); pareto its tail index ({pareto: 2.5})")
    if kind == "lognormal" and not shape > 0:
        raise InputError(f"{prefix}.size_distribution.lognormal", shape, "sigma must be > 0")
    if kind == "pareto" and not shape > 1:
        raise InputError(f"{prefix}.size_distribution.pareto", shape, "tail index alpha must be > 1 (finite mean)")
    return SizeDistribution(kind, t.mean_size, shape=shape)


def _derived(t, prefix: str, base_dir: Path | None):
    """{pollux: APP} or {job: FILE, gpu: NAME[, gpus_per_node: N]}: a speedup from the shared performance model."""
    sp = t.speedup
    if not isinstance(sp, dict) or not ({"pollux", "job"} & set(sp)):
        return None
    from gpuwise.plan.rent import perfmodel

    if "pollux" in sp:
        if len(sp) != 1:
            raise InputError(f"{prefix}.speedup", sp, "give only {pollux: APP}")
        return perfmodel.from_pollux(str(sp["pollux"]), t.max_gpus, f"{prefix}.speedup.pollux")
    extra = set(sp) - {"job", "gpu", "gpus_per_node"}
    if extra or "gpu" not in sp:
        raise InputError(f"{prefix}.speedup", sp, "give {job: FILE, gpu: NAME} (optional gpus_per_node: 8)")
    gpn = sp.get("gpus_per_node", 8)
    try:
        whole = float(gpn).is_integer() and float(gpn) >= 1
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise InputError(f"{prefix}.speedup.gpus_per_node", gpn, "must be a whole number of GPUs >= 1, e.g. 8")
    path = Path(str(sp["job"]))
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return perfmodel.from_job(str(path), str(sp["gpu"]), t.max_gpus, f"{prefix}.speedup", int(float(gpn)))


@dataclass(frozen=True)
class Arrival:
    """One row of a rent trace CSV."""

    time_h: float            # arrival, hours
    type: str                # a job type of the spec
    size: float | None       # single-GPU hours of work (None: drawn from the type's distribution)


@lru_cache(maxsize=1)
def _arrival_row() -> type:
    from typing import Optional

    from pydantic import Field, ValidationInfo, field_validator

    from gpuwise.user_files import known_name, strict_base

    class ArrivalRow(strict_base()):
        arrival_time: float = Field(ge=0, description="arrival, hours")
        type: str = Field(description="a job type named in the spec's types")
        size: Optional[float] = Field(None, gt=0, description="single-GPU hours (blank: drawn from the type)")

        @field_validator("type", mode="before")
        @classmethod
        def _known(cls, v, info: ValidationInfo):
            return known_name(v, info.context["names"])

    return ArrivalRow


def load_trace(path: Path, names) -> list[Arrival]:
    """The arrivals of a rent trace CSV (arrival_time,type[,size]), validated: times finite, >= 0 and
    sorted, types among ``names`` (closest suggested), sizes > 0; one-line errors name the row and column."""
    import csv

    from gpuwise.user_files import check_sorted, read_text, validate_row

    reader = csv.DictReader(read_text(path, "trace", "CSV of arrival_time,type[,size]").splitlines())
    if not reader.fieldnames or not {"arrival_time", "type"} <= set(reader.fieldnames):
        raise InputError(f"trace {path}", reader.fieldnames, "needs columns arrival_time,type[,size]")
    rows = [validate_row(_arrival_row(), r, f"trace {path} row {i}", {"names": list(names)})
            for i, r in enumerate(reader, start=1)]
    if not rows:
        raise InputError(f"trace {path}", "empty", "add at least one arrival")
    check_sorted([r.arrival_time for r in rows], lambda i: f"trace {path} row {i} column arrival_time")
    return [Arrival(r.arrival_time, r.type, r.size) for r in rows]


def _trace_stats(path: Path, names: list[str]) -> dict[str, tuple[float, list[float], float]]:
    """Per type in a trace CSV (arrival_time,type,size): (arrival rate, sizes, horizon hours)."""
    if not path.exists():
        raise InputError("trace", str(path), "file not found; the path is relative to the YAML file")
    rows = load_trace(path, names)
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in rows:
        if r.size is not None:
            per[r.type].append(r.size)
    horizon = rows[-1].time_h - rows[0].time_h
    if horizon <= 0:
        raise InputError(f"trace {path.name}", "horizon 0", "needs arrivals spread over time")
    return {n: (len(v) / horizon, v, horizon) for n, v in per.items() if v}


def parse_budget(value, field: str = "budget") -> Budget:
    """2 | "2" -> 2 GPUs; "30usd", "$30", "$30/h", {usd_per_hour: 30}, {gpus: 2}."""
    if isinstance(value, dict):
        if not (len(value) == 1 and next(iter(value)) in ("gpus", "usd_per_hour")):
            raise InputError(field, value, "give a number of GPUs, {gpus: 2} or {usd_per_hour: 30}")
        (unit, value), = value.items()
        field, text = f"{field}.{unit}", str(value).strip()
    else:
        text = str(value).strip().lower().replace(" ", "")
        unit = "gpus"
        if text.startswith("$") or text.endswith(("usd", "usd/h", "$/h", "/h")):
            unit = "usd_per_hour"
            for token in ("usd/h", "$/h", "/h", "usd", "$"):
                text = text.replace(token, "")
        elif text.endswith("gpus") or text.endswith("gpu"):
            text = text.removesuffix("gpus").removesuffix("gpu")
    try:
        amount = float(text)
    except ValueError:
        raise InputError(field, value, "give a number of GPUs (e.g. 2) or USD per hour (e.g. 30usd/h)") from None
    if not (amount > 0 and math.isfinite(amount)):
        raise InputError(field, value, "must be a positive number")
    return Budget(amount, unit)


def parse_spec(data: Any, source: str = "<input>", base_dir: Path | None = None) -> RentSpec:
    from pydantic import ValidationError

    from gpuwise.plan.rent.speedup import from_mapping

    if not isinstance(data, dict):
        raise InputError(source, "(empty file)" if data is None else type(data).__name__, "the file must be a mapping with a `types:` list")
    if "types" not in data and {"model", "training"} & set(data):
        raise InputError(source, "a job spec", "gpuwise rent takes a job-types YAML with a `types:` list "
                         "(see examples/rent/); a single job's spec goes to gpuwise plan or estimate")
    try:
        model = _models().model_validate(data)
    except ValidationError as exc:
        from gpuwise.errors import validation_error

        raise validation_error(exc, _models(), source) from None
    trace = None
    if model.trace:
        trace = Path(model.trace)
        if not trace.is_absolute() and base_dir is not None:
            trace = base_dir / trace
    fitted = _trace_stats(trace, [t.name for t in model.types]) if trace is not None else {}
    types = []
    notes: list[str] = []
    unpriced: list[str] = []
    names = set()
    for i, t in enumerate(model.types):
        prefix = f"types[{i}]"
        if t.name in fitted and (t.arrival_rate is None or (t.mean_size is None and t.sizes is None)):
            rate, sizes, horizon = fitted[t.name]
            upd = {}
            if t.arrival_rate is None:
                upd["arrival_rate"] = rate
            if t.mean_size is None and t.sizes is None:
                upd["sizes"] = sizes
            t = t.model_copy(update=upd)
            notes.append(f"type {t.name}: " + " and ".join(
                {"arrival_rate": f"arrival rate {rate:.4g}/h", "sizes": f"sizes (mean {sum(sizes) / len(sizes):.4g} h)"}[k]
                for k in upd) + f" fitted from {len(sizes)} jobs over {horizon:.4g} h of {trace.name}")
        if t.arrival_rate is None:
            raise InputError(f"{prefix}.arrival_rate", None, "give arrival_rate (jobs per hour) or a trace with this type")
        if t.name in names:
            raise InputError(f"{prefix}.name", t.name, "type names must be unique")
        names.add(t.name)
        derived = _derived(t, prefix, base_dir)
        if derived is not None:
            speed = derived.speedup.with_cap(t.max_gpus)
            if t.mean_size is None and t.sizes is None:
                t = t.model_copy(update={"mean_size": derived.single_gpu_hours})
                notes.append(f"type {t.name}: mean size {derived.single_gpu_hours:.4g} single-GPU hours = the "
                             "performance model's time to target on one GPU")
            notes.append(f"type {t.name}: speedup from the {derived.source}; evaluated at k="
                         + ",".join(f"{k}" for k in derived.table))
        else:
            speed = from_mapping(t.speedup, f"{prefix}.speedup").with_cap(t.max_gpus)
        types.append(JobType(name=t.name, arrival_rate=t.arrival_rate, sizes=_sizes(t, prefix), speedup=speed,
                             price=t.price_per_gpu_hour or model.price_per_gpu_hour or 1.0, field_prefix=prefix))
        if not (t.price_per_gpu_hour or model.price_per_gpu_hour):
            unpriced.append(t.name)
    budget = None if model.budget is None else parse_budget(model.budget)
    return RentSpec(tuple(types), budget, trace, source, tuple(notes), tuple(unpriced))


def load_spec(path: str | Path) -> RentSpec:
    from gpuwise.user_files import load_yaml

    path = Path(path)
    return parse_spec(load_yaml(path, "JOBS.yaml", "job-types YAML (see examples/rent/)"), path.name, path.parent)
