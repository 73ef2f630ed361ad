"""Cloud GPU offerings read from SkyPilot v8 ``vms.csv`` files.

Sources, lowest precedence first (a later source replaces an earlier one for the same cloud, whole file):
1. the bundled snapshot ``gpuwise/data/catalog/v8/<cloud>/vms.csv`` (dates and origin in ``SNAPSHOT.json``);
2. ``~/.sky/catalogs/v8/<cloud>/vms.csv`` when present (SkyPilot's own cache; ``include_user=True``);
3. folders given by the user (``dirs``): ``<dir>/<cloud>/vms.csv``, ``<dir>/<cloud>_*vms*.csv`` (e.g. ``aws_gpu_vms_subset.csv``), or a path
   to such a file. User files are dated by their modification time.

Columns differ per cloud (compare the bundled files): AWS has ``AvailabilityZone`` and (in the bundled
subset) ``GpuMemoryMiBPerGpu``; Azure and Lambda have no zone column; Lambda sells no spot. Rows are read by
column name, so any cloud whose file has ``InstanceType, AcceleratorName, AcceleratorCount, vCPUs,
MemoryGiB, Price, SpotPrice, Region`` parses the same way.

GCP is different: rows with an empty ``InstanceType`` price N attached GPUs in one zone, host rows price
only vCPUs and memory, and a GPU VM costs host row + GPU row of the same zone (on-demand and spot each
summed; spot is None unless both parts have one). Which host carries which GPUs is data:
``gpuwise/data/catalog/gcp_gpu_hosts.csv`` (a2/a3/a4/g2 hosts are fixed per GPU count; T4/V100/P100/P4
attach to n1-highmem-8, SkyPilot's default host).

Accelerator names resolve through the GPU table (``gpuwise.hardware.gpus``); instance families whose name
is ambiguous (Azure NC A100 v4 is the PCIe part, Lambda ``gpu_1x_h100_pcie``...) or whose GPU count is
wrong are corrected by ``gpuwise/data/catalog/instance_gpu_overrides.csv``. Rows that are not GPU
offerings gpuwise can plan on (TPUs, fractional vGPU slices, unknown accelerators) are never dropped
silently: they are counted in ``Catalog.skipped`` with the reason.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from gpuwise.data import data_path, read_commented_csv
from gpuwise.errors import InputError, unknown_name
from gpuwise.hardware.gpus import get_gpu, resolve_gpu_name, user_gpu
from gpuwise.hardware.types import Offering

# Accelerators that are deliberately not GPUs in the table (regex on the catalog name -> reason).
NOT_MAPPED: tuple[tuple[str, str], ...] = (
    (r"tpu-.*", "Google TPU, not a GPU"),
    (r"inferentia\d*", "AWS Inferentia inference chip, not a GPU"),
    (r"trainium\d*", "AWS Trainium, not a GPU"),
    (r"gaudi.*|hl-205", "Intel Gaudi (AWS DL1), not a GPU"),
    (r"radeon pro v520", "AMD Radeon Pro V520 graphics GPU, no training data in the GPU table"),
    (r"gb200|gb300", "Grace-Blackwell rack part, not in the GPU table"),
)

USER_CATALOG_DIR = Path("~/.sky/catalogs/v8")


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if v == v else None  # NaN -> None


def not_mapped_reason(accelerator: str) -> str | None:
    """Why a catalog accelerator name is deliberately not resolved to a GPU (None if it should be)."""
    for pattern, reason in NOT_MAPPED:
        if re.fullmatch(pattern, accelerator.strip().lower()):
            return reason
    return None


@dataclass(frozen=True)
class _Override:
    cloud: str
    pattern: re.Pattern[str]
    gpu: str | None
    gpus_per_node: float | None


@lru_cache(maxsize=1)
def _overrides() -> tuple[_Override, ...]:
    out = []
    for row in read_commented_csv(data_path("catalog", "instance_gpu_overrides.csv")):
        gpu = row["gpu"].strip() or None
        if gpu is not None:
            gpu = get_gpu(gpu).name  # fails loudly if the data file names an unknown GPU
        out.append(_Override(row["cloud"].strip(), re.compile(row["instance_pattern"].strip()), gpu,
                             _float(row["gpus_per_node"])))
    return tuple(out)


@lru_cache(maxsize=1)
def _gcp_hosts() -> dict[tuple[str, str], tuple[str, ...]]:
    """(accelerator, count or '*') -> host instance types."""
    return {(r["accelerator"].strip(), r["count"].strip()): tuple(r["host_instance_type"].strip().split("|"))
            for r in read_commented_csv(data_path("catalog", "gcp_gpu_hosts.csv"))}


@lru_cache(maxsize=1)
def _snapshot() -> dict[str, dict[str, str]]:
    with open(data_path("catalog", "v8", "SNAPSHOT.json")) as fh:
        return {k: v for k, v in json.load(fh).items() if not k.startswith("_")}


@dataclass
class Catalog:
    """Offerings of every cloud found, with each cloud's catalog date and file."""

    offerings: list[Offering]
    dates: dict[str, str]                   # cloud -> ISO date of its prices ("unknown" if not recorded)
    sources: dict[str, str]                 # cloud -> file the offerings were read from
    skipped: dict[str, int] = field(default_factory=dict)  # "cloud accelerator: reason" -> rows
    files: dict[str, Path] = field(default_factory=dict)   # cloud -> path of the vms.csv read
    market: list[Offering] | None = None   # the rows before prices the user gave (None: `offerings`)
    notes: list[str] = field(default_factory=list)         # provenance of prices the user gave
    user_offerings: frozenset = frozenset()   # the user's own --offerings rows (the spec's clouds/regions keep them)

    def cpu_instances(self, cloud: str | None = None) -> list[Offering]:
        """CPU-only instance types (no accelerator) of one or all clouds, read on first use.

        Returned as Offering records with ``gpu=""`` and ``gpus_per_node=0``. GCP host rows of GPU-only
        families (a2/a3/a4/g2, which Google sells only with their GPUs) are left out.
        """
        if cloud is not None and cloud.strip().lower() not in self.files:
            raise unknown_name("cloud", cloud, self.clouds())
        wanted = [cloud.strip().lower()] if cloud else self.clouds()
        out: list[Offering] = []
        for c in wanted:
            if c not in self.files:
                continue   # prices the user gave: GPU offerings only
            f = self.files[c]
            out.extend(_cpu_rows(c, str(f), self.dates[c], _shown_name(c, f)))
        return out

    def clouds(self) -> list[str]:
        return sorted(self.dates)

    def regions(self, cloud: str | None = None) -> list[str]:
        return sorted({o.region for o in self.offerings if cloud is None or o.cloud == cloud})

    def gpus(self) -> list[str]:
        return sorted({o.gpu for o in self.offerings})

    def filter(self, gpu: str | None = None, cloud: str | None = None, region: str | None = None,
               spot: bool = False) -> list[Offering]:
        """Offerings matching every given criterion; `spot=True` keeps only rows with a spot price.

        Names are checked: an unknown GPU, cloud or region raises InputError with the closest names.
        """
        want_gpu = user_gpu(gpu).name if gpu else None
        want_cloud = None
        if cloud:
            want_cloud = cloud.strip().lower()
            if want_cloud not in self.dates:
                raise unknown_name("cloud", cloud, self.clouds())
        if region:
            valid = self.regions(want_cloud)
            if region not in valid:
                raise unknown_name("region", region, valid)
        out = [o for o in self.offerings
               if (want_gpu is None or o.gpu == want_gpu)
               and (want_cloud is None or o.cloud == want_cloud)
               and (region is None or o.region == region)
               and (not spot or o.spot_price_usd_per_hour is not None)]
        return out  # a known GPU that no catalog sells gives [] (the CLI says so)


def _resolve(cloud: str, instance: str, accelerator: str, count: float | None,
             skipped: dict[str, int]) -> tuple[str, float] | None:
    """(canonical GPU, GPUs per node) of a catalog row, or None (and counted in `skipped`)."""
    res, reason = _resolution(cloud, instance, accelerator, count)
    if reason:
        skipped[reason] = skipped.get(reason, 0) + 1
    return res


@lru_cache(maxsize=4096)   # a catalog repeats each (instance, accelerator) in every region and zone
def _resolution(cloud: str, instance: str, accelerator: str, count: float | None,
                ) -> tuple[tuple[str, float] | None, str | None]:
    """(`_resolve`'s answer, the `skipped` key it counts the row under or None)."""
    gpu = resolve_gpu_name(accelerator)
    for ov in _overrides():
        if ov.cloud == cloud and ov.pattern.fullmatch(instance):
            gpu = ov.gpu or gpu
            count = ov.gpus_per_node if ov.gpus_per_node is not None else count
            break
    reason = None
    if gpu is None:
        deliberate = not_mapped_reason(accelerator)
        if deliberate:  # one entry per reason, not per TPU slice size
            return None, f"{cloud} {deliberate}"
        reason = "accelerator not in the GPU table (gpuwise/data/gpus.csv)" + _suggestion(accelerator)
    elif not count or count <= 0:
        reason = "no GPU count"
    elif count < 1:
        reason = "fractional GPU (vGPU slice), not plannable for training"
    if reason:
        return None, f"{cloud} {accelerator}: {reason}"
    return (gpu, float(count)), None  # type: ignore[arg-type]


def _suggestion(accelerator: str) -> str:
    """'; did you mean H100?' when a known GPU name is close (a typo in a user's file), else ''."""
    from gpuwise.errors import did_you_mean
    from gpuwise.hardware.gpus import known_names

    hint = did_you_mean(accelerator, known_names())
    return f"; {hint}" if hint.startswith("did you mean") else ""


@contextmanager
def _vms_csv(path: Path, required: tuple[str, ...], keep: Callable[[dict[str, int]], str] | None = None,
             ) -> Iterator[tuple[dict[str, int], Iterator[tuple[int, list[str]]]]]:
    """Column index by name and the complete rows (line number, cells) of a v8 vms.csv, after checking
    `required` columns. keep(columns): a regex that matches the start of every row the caller may keep
    (a necessary condition, not the caller's test); rows it does not match may be left out."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise InputError("catalog", str(path), "empty file; not a SkyPilot v8 vms.csv")
        col = {name: i for i, name in enumerate(header)}
        _require(path, col, required)
        rows = _plain_rows(path, len(header), keep(col)) if keep else None
        if rows is None:
            rows = ((line, row) for line, row in enumerate(reader, start=2) if len(row) >= len(header))
        yield col, rows


def _plain_rows(path: Path, width: int, keep: str) -> Iterator[tuple[int, list[str]]] | None:
    """The rows of `path` that `keep` matches (from the newline before them), or None to read every row
    with the csv module. Most rows of the big files are CPU instances (Azure: 829 GPU rows of 56,672), and a regex
    finds the others without parsing them. Only for files without quotes, carriage returns or NUL
    bytes, where each line is one row and its cells are split at commas, exactly as csv.reader does
    (line numbers too: a blank line is a row of no cells to both); other files, and text that does not
    decode (csv.reader's error names the byte), take the csv module's path."""
    try:
        with open(path, newline="") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        return None
    if '"' in text or "\r" in text or "\0" in text:
        return None

    def rows() -> Iterator[tuple[int, list[str]]]:
        line, at = 1, 0
        for m in re.compile(keep, re.M).finditer(text):   # from the newline before each row: the header's on
            start = m.start() + 1
            line += text.count("\n", at, start)
            at = start
            end = text.find("\n", start)
            cells = text[start:end if end >= 0 else len(text)].split(",")
            if len(cells) >= width:
                yield line, cells
    return rows()


_OFFERING_FIELDS = Offering.__dataclass_fields__.keys()


def _offering(**fields) -> Offering:
    """``Offering(**fields)`` without the frozen dataclass's __init__, which sets each field through
    object.__setattr__ (a catalog load builds ~4,400): Offering has no defaults, __post_init__ or descriptors,
    so the same object (equal, same hash and pickle; tests/test_hw_catalog.py compares the two). Anything but
    exactly its fields takes the __init__ (and its TypeError)."""
    if fields.keys() != _OFFERING_FIELDS:
        return Offering(**fields)
    offering = object.__new__(Offering)
    offering.__dict__.update(fields)
    return offering


def _cell(i: int, value: str) -> str:
    """Regex matching the newline before a row whose cell `i` (0-based) `value` matches at its start
    (cells hold no comma). A literal first character lets the regex engine skip to each line's start."""
    return f"\n(?:[^,\n]*,){{{i}}}(?:{value})"


@lru_cache(maxsize=1)
def _vms_row() -> type:
    """The cells of a vms.csv row that gpuwise reads, typed (user files are validated like every
    other user input: gpuwise.user_files)."""
    from typing import Optional

    from pydantic import Field

    from gpuwise.user_files import strict_base

    class VmsRow(strict_base(text_cells=True)):     # cells of a CSV file: text only (_reader)
        InstanceType: str = ""
        AcceleratorName: str = ""
        AcceleratorCount: Optional[float] = Field(None, gt=0, description="GPUs per instance")
        vCPUs: Optional[float] = Field(None, gt=0)
        MemoryGiB: Optional[float] = Field(None, gt=0, description="host memory")
        Price: Optional[float] = Field(None, ge=0, description="USD per hour on demand")
        SpotPrice: Optional[float] = Field(None, ge=0, description="USD per hour on spot")
        Region: str = Field(min_length=1)
        AvailabilityZone: Optional[str] = None

    return VmsRow


def _reader(path: Path, col: dict[str, int]):
    """row(line, cells) -> a validated VmsRow of this file: prices finite and >= 0 (a plan costing
    -$36,242 was once recommended from a negative one), counts and sizes > 0, a region; errors name
    the file, line and column."""
    from gpuwise.user_files import validate_cells

    model = _vms_row()
    pick = [(k, i) for k, i in col.items() if k in model.model_fields]
    # validate_row's cleaning (stripped text, blank cells absent) in one pass over the cells it reads
    return lambda line, cells: validate_cells(model, {k: v for k, i in pick if (v := cells[i].strip())},
                                              lambda: f"catalog {path} line {line}")


def _parse_generic(cloud: str, path: Path, date: str, skipped: dict[str, int], name: str) -> list[Offering]:
    out: list[Offering] = []
    with _vms_csv(path, ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region"),
                  lambda col: _cell(col["AcceleratorName"], "[^,\n]")) as (col, rows):   # GPU rows only
        i_acc, read = col["AcceleratorName"], _reader(path, col)
        for line, cells in rows:
            if not cells[i_acc].strip():
                continue  # CPU-only instance
            row = read(line, cells)
            res = _resolve(cloud, row.InstanceType, row.AcceleratorName, row.AcceleratorCount, skipped)
            if res is None:
                continue
            out.append(_offering(
                cloud=cloud, region=row.Region, zone=row.AvailabilityZone, instance_type=row.InstanceType,
                gpu=res[0], gpus_per_node=res[1], vcpus=row.vCPUs, memory_gib=row.MemoryGiB,
                price_usd_per_hour=row.Price, spot_price_usd_per_hour=row.SpotPrice,
                catalog_date=date, catalog_source=name))
    return out


def _parse_gcp(path: Path, date: str, skipped: dict[str, int], name: str) -> list[Offering]:
    hosts_for = _gcp_hosts()
    wanted_hosts = {h for hs in hosts_for.values() for h in hs}
    host_names = "|".join(map(re.escape, sorted(wanted_hosts)))
    gpu_rows = []
    hosts: dict[tuple[str, str], object] = {}  # (instance, zone) -> row
    with _vms_csv(path, ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice",
                         "Region", "AvailabilityZone", "vCPUs", "MemoryGiB"),
                  # GPU rows (no instance type) and the host VMs of GPUs
                  lambda col: _cell(col["InstanceType"], f"(?:{host_names})?(?:,|$)"),
                  ) as (col, rows):
        i_inst, i_acc, read = col["InstanceType"], col["AcceleratorName"], _reader(path, col)
        for line, cells in rows:
            inst = cells[i_inst]
            if not inst and cells[i_acc]:
                gpu_rows.append(read(line, cells))
            elif inst in wanted_hosts:
                host = read(line, cells)
                hosts[(inst, host.AvailabilityZone)] = host
    out: list[Offering] = []
    for g in gpu_rows:
        acc, count = g.AcceleratorName, g.AcceleratorCount
        cnt_key = f"{count:g}" if count is not None else ""
        host_types = hosts_for.get((acc, cnt_key)) or hosts_for.get((acc, "*"))
        if host_types is None:
            res = _resolve("gcp", "", acc, count, skipped)
            if res is not None:  # a GPU we know but no host rule for it
                key = f"gcp {acc} x{cnt_key}: no host VM rule in gcp_gpu_hosts.csv"
                skipped[key] = skipped.get(key, 0) + 1
            continue
        zone = g.AvailabilityZone
        present = [(h, hosts[(h, zone)]) for h in host_types if (h, zone) in hosts]
        if not present:
            key = f"gcp {acc} x{cnt_key}: no {'/'.join(host_types)} host row in the GPU's zone"
            skipped[key] = skipped.get(key, 0) + 1
        for host_type, host in present:
            res = _resolve("gcp", host_type, acc, count, skipped)
            if res is None:
                continue
            out.append(_offering(
                cloud="gcp", region=g.Region, zone=zone, instance_type=host_type,
                gpu=res[0], gpus_per_node=res[1], vcpus=host.vCPUs, memory_gib=host.MemoryGiB,
                price_usd_per_hour=_sum(host.Price, g.Price), spot_price_usd_per_hour=_sum(host.SpotPrice, g.SpotPrice),
                catalog_date=date, catalog_source=name))
    return out


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a + b, 6)


def _require(path: Path, col: dict[str, int], names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in col]
    if missing:
        raise InputError("catalog", str(path), f"not a SkyPilot v8 vms.csv: missing column(s) {', '.join(missing)}")


def parse_vms_csv(cloud: str, path: Path | str, date: str, skipped: dict[str, int] | None = None,
                  source_name: str | None = None) -> list[Offering]:
    """GPU offerings of one cloud's vms.csv (GCP rows combined host + GPUs).

    `skipped` collects rows that are not plannable GPU offerings; `source_name` is what each offering
    records as `catalog_source` (default: the path).
    """
    skipped = {} if skipped is None else skipped
    path = Path(path)
    name = source_name or str(path)
    try:
        if cloud == "gcp":
            return _parse_gcp(path, date, skipped, name)
        return _parse_generic(cloud, path, date, skipped, name)
    except UnicodeDecodeError as exc:
        raise InputError("catalog", str(path), f"not UTF-8 text (byte {exc.start}); not a SkyPilot v8 vms.csv") from None


_FILE_NAME = re.compile(r"([a-z0-9]+)_(?:.*_)?vms.*\.csv")  # <cloud>_vms.csv, <cloud>_gpu_vms_subset.csv


def _files_in(location: Path) -> dict[str, Path]:
    """cloud -> vms.csv under a user-given folder or file."""
    if location.is_file():
        cloud = _cloud_of(location)
        if cloud is None:
            raise InputError("catalog-dir", str(location),
                             "name the file <cloud>/vms.csv or <cloud>_vms.csv so its cloud is known")
        return {cloud: location}
    if not location.is_dir():
        raise InputError("catalog-dir", str(location), "give a folder holding <cloud>/vms.csv files")
    found: dict[str, Path] = {}
    for sub in sorted(location.iterdir()):
        if sub.is_dir() and (sub / "vms.csv").is_file():
            found[sub.name.lower()] = sub / "vms.csv"
        elif sub.is_file() and _FILE_NAME.fullmatch(sub.name.lower()):
            found.setdefault(sub.name.lower().split("_", 1)[0], sub)
    if (location / "vms.csv").is_file() and _cloud_of(location / "vms.csv"):
        found[_cloud_of(location / "vms.csv")] = location / "vms.csv"  # type: ignore[index]
    if not found:
        raise InputError("catalog-dir", str(location), "no <cloud>/vms.csv or <cloud>_vms.csv files found there")
    return found


def _cloud_of(path: Path) -> str | None:
    if path.name == "vms.csv":
        return path.parent.name.lower() or None
    m = _FILE_NAME.fullmatch(path.name.lower())
    return m.group(1) if m else None


def _shown_name(cloud: str, path: Path) -> str:
    """What offerings record as their catalog file: bundled files relative to the package, others as given."""
    if path == data_path("catalog", "v8", cloud, "vms.csv"):
        return f"gpuwise/data/catalog/v8/{cloud}/vms.csv"
    return str(path)


def _mtime_date(path: Path) -> str:
    return _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc).date().isoformat()


def load_catalog(dirs: list[str | Path] | tuple[str | Path, ...] | None = None,
                 include_user: bool = True) -> Catalog:
    """The merged catalog (bundled snapshot, then ~/.sky/catalogs/v8, then `dirs`); cached per process."""
    user = USER_CATALOG_DIR.expanduser()
    user_key = str(user) if include_user and user.is_dir() else None
    return _load(tuple(str(Path(d).expanduser().resolve()) for d in (dirs or ())), user_key)


@lru_cache(maxsize=8)
def _load(dirs: tuple[str, ...], user_dir: str | None) -> Catalog:
    # cloud -> candidate files, lowest precedence first: (file, date, source text, from the ~/.sky cache)
    candidates: dict[str, list[tuple[Path, str, str, bool]]] = {}
    bundled = data_path("catalog", "v8")
    for cloud, meta in _snapshot().items():
        f = bundled / cloud / "vms.csv"
        if f.is_file():
            candidates.setdefault(cloud, []).append((f, meta["date"], meta["source"], False))
    locations = ([(Path(user_dir), True)] if user_dir else []) + [(Path(d), False) for d in dirs]
    for loc, from_cache in locations:
        try:
            files = _files_in(loc)
        except InputError:
            if from_cache:
                continue  # an empty ~/.sky cache is not the user's mistake
            raise
        for cloud, f in files.items():
            candidates.setdefault(cloud, []).append((f, _mtime_date(f), str(f), from_cache))
    offerings: list[Offering] = []
    skipped: dict[str, int] = {}
    dates, sources, files_read = {}, {}, {}
    for cloud in sorted(candidates):
        for f, date, source, from_cache in reversed(candidates[cloud]):
            try:
                rows = parse_vms_csv(cloud, f, date, skipped, _shown_name(cloud, f))
            except InputError:
                if not from_cache:
                    raise  # a file the user named must parse
                # SkyPilot caches clouds whose files gpuwise cannot read (e.g. Kubernetes): fall back
                key = f"{cloud}: unreadable file in the SkyPilot cache ({f}), next source used"
                skipped[key] = skipped.get(key, 0) + 1
                continue
            offerings.extend(rows)
            dates[cloud], sources[cloud], files_read[cloud] = date, source, f
            break
    return Catalog(offerings=offerings, dates=dates, sources=sources, skipped=skipped, files=files_read)


@lru_cache(maxsize=16)
def _cpu_rows(cloud: str, path: str, date: str, source: str) -> tuple[Offering, ...]:
    # GCP families sold only with their GPUs (their host rows are not CPU instances one can rent)
    gpu_only = tuple(sorted({h.split("-")[0] + "-" for (_, count), hosts in _gcp_hosts().items()
                             if count != "*" for h in hosts}))
    out = []
    with _vms_csv(Path(path), ("InstanceType", "AcceleratorName", "Price", "Region")) as (col, rows):
        read = _reader(Path(path), col)
        for line, cells in rows:
            if cells[col["AcceleratorName"]].strip() or not cells[col["InstanceType"]]:
                continue
            if cloud == "gcp" and cells[col["InstanceType"]].startswith(gpu_only):
                continue
            row = read(line, cells)
            out.append(Offering(
                cloud=cloud, region=row.Region, zone=row.AvailabilityZone, instance_type=row.InstanceType,
                gpu="", gpus_per_node=0.0, vcpus=row.vCPUs, memory_gib=row.MemoryGiB, price_usd_per_hour=row.Price,
                spot_price_usd_per_hour=row.SpotPrice, catalog_date=date, catalog_source=source))
    return tuple(out)


def catalog_age(cat: Catalog, cloud: str, today: _dt.date | None = None) -> str:
    """'catalog dated 2026-05-20, 190 days old' (or why the date is unknown): prices drift, spot most."""
    date = cat.dates[cloud]
    try:
        day = _dt.date.fromisoformat(date)
    except ValueError:
        meta = _snapshot().get(cloud, {})
        note = meta.get("date_note") if meta.get("source") == cat.sources[cloud] else None
        return f"catalog date unknown ({note})" if note else "catalog date unknown"
    days = ((today or _dt.datetime.now(_dt.timezone.utc).date()) - day).days
    return f"catalog dated {date}, {days} day{'s' if days != 1 else ''} old"


def catalog_assumptions(cat: Catalog, clouds: list[str] | None = None) -> list[str]:
    """Human-readable provenance lines for outputs that price offerings of `clouds` (default: all)."""
    clouds = cat.clouds() if clouds is None else clouds
    lines = [f"{c} prices: {catalog_age(cat, c)} ({cat.sources[c]})" for c in clouds] + list(cat.notes)
    if "gcp" in clouds:
        lines.append("GCP GPU VM price = host VM row + attached-GPU row of the same zone (on-demand and spot); "
                     "T4/V100/P100/P4 priced on an n1-highmem-8 host")
    if cat.skipped:
        total = sum(cat.skipped.values())
        lines.append(f"{total} catalog rows are not GPU offerings gpuwise plans on (TPUs, vGPU slices, ...)")
        typos = [k for k in cat.skipped if "did you mean" in k and k.split(" ", 1)[0] in clouds]
        lines += [f"skipped catalog rows: {k}" for k in typos]   # likely misspelt GPU names
    return lines


__all__ = ["Catalog", "NOT_MAPPED", "catalog_age", "catalog_assumptions", "load_catalog", "not_mapped_reason", "parse_vms_csv"]
