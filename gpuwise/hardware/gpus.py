"""The GPU table: `gpuwise/data/gpus.csv` loaded once into `GpuSpec` records.

Names resolve case-insensitively through each row's canonical name and its aliases (which include
the accelerator names used by SkyPilot catalogs, e.g. ``A100-80GB`` or ``H100-MEGA``). Separators
are ignored when matching (``a100_80gb``, ``A100 80GB`` and ``A100-80GB`` are the same name). A bare
``H100`` / ``V100`` means the SXM part, as clouds sell it. A bare ``A100`` names two parts whose memory
differs 2x (40 and 80 GB), so a name a user types (`user_gpu`: --gpu flags, a job spec's
constraints.gpus) asks which; files written in the clouds' and papers' names (catalog rows, where
``A100`` is SkyPilot's name for the 40 GB part, cluster specs, traces) keep the SXM reading.
"""

from __future__ import annotations

import re
from functools import lru_cache

from gpuwise.data import data_path, read_commented_csv
from gpuwise.errors import InputError, unknown_name
from gpuwise.hardware.types import GpuSpec

_FLOAT_FIELDS = ("memory_gib", "fp32_tflops", "hbm_gbps", "intra_node_gbps")
_OPTIONAL_FLOAT_FIELDS = ("tf32_tflops", "bf16_tflops", "fp16_tflops", "fp8_tflops")


def _key(name: str) -> str:
    """Matching key: lower case without spaces, dashes, underscores or dots."""
    return re.sub(r"[\s\-_.]", "", name.strip().lower())


def _parse_row(row: dict[str, str], line: int) -> GpuSpec:
    try:
        kwargs: dict[str, object] = {f: float(row[f]) for f in _FLOAT_FIELDS}
        kwargs.update({f: (float(row[f]) if row[f].strip() else None) for f in _OPTIONAL_FLOAT_FIELDS})
    except (KeyError, ValueError) as exc:
        raise InputError("gpus.csv", f"line {line}", f"fix the numeric columns ({exc})") from exc
    aliases = tuple(a.strip() for a in row.get("aliases", "").split("|") if a.strip())
    dev = (row.get("device_mib") or "").strip()
    try:
        kwargs["device_mib"] = float(dev) if dev else None
    except ValueError as exc:
        raise InputError("gpus.csv", f"line {line}", f"device_mib must be a number of MiB ({exc})") from exc
    kwargs["device_mib_source"] = (row.get("device_mib_source") or "").strip()
    return GpuSpec(name=row["name"].strip(), vendor=row["vendor"].strip(),
                   architecture=row["architecture"].strip(), interconnect=row["interconnect"].strip(),
                   form_factor=row["form_factor"].strip(), source=row["source"].strip(),
                   aliases=aliases, **kwargs)  # type: ignore[arg-type]


@lru_cache(maxsize=1)
def _table() -> tuple[tuple[GpuSpec, ...], dict[str, GpuSpec]]:
    specs = tuple(_parse_row(r, i + 1) for i, r in enumerate(read_commented_csv(data_path("gpus.csv"))))
    index: dict[str, GpuSpec] = {}
    for spec in specs:
        for name in (spec.name, *spec.aliases):
            k = _key(name)
            if k in index and index[k].name != spec.name:
                # An ambiguous alias would silently pick one part: refuse to load instead.
                raise InputError("gpus.csv", name, f"alias used by both {index[k].name} and {spec.name}")
            index[k] = spec
    return specs, index


def all_gpus() -> list[GpuSpec]:
    """Every GPU in the table, in file order."""
    return list(_table()[0])


def resolve_gpu_name(name: str | None) -> str | None:
    """Canonical GPU name for a name or alias (e.g. a catalog AcceleratorName); None if unknown."""
    if not name or not name.strip():
        return None
    spec = _table()[1].get(_key(name))
    return spec.name if spec else None


# bare names a user may mean for more than one part: (the parts, in the words of the question)
_ASK_WHICH = {"a100": ("A100-40GB", "A100-80GB")}


def user_gpu(name: str, field: str = "gpu") -> GpuSpec:
    """`get_gpu` for a name a user typed: a bare name of several parts (``A100``) asks which."""
    which = _ASK_WHICH.get(_key(name or ""))
    if which:
        raise InputError(field, name, f"{name} names {len(which)} GPUs; give {' or '.join(which)}")
    return get_gpu(name, field)


def get_gpu(name: str, field: str = "gpu") -> GpuSpec:
    """The GpuSpec for a name or alias; unknown names raise InputError (naming `field`) with the closest names."""
    spec = _table()[1].get(_key(name or ""))
    if spec is None:
        raise unknown_name(field, name, known_names())
    return spec


def known_names() -> list[str]:
    """Canonical names and aliases, as written in the table (for suggestions and --help)."""
    names: list[str] = []
    for spec in _table()[0]:
        names.append(spec.name)
        names.extend(spec.aliases)
    return names
