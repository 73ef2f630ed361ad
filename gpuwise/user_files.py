"""Reading the files a user names (job specs, job-type lists, clusters, workloads, measured rows).

Base layer, next to `gpuwise.errors`: every way such a file can fail to be read (missing, a folder,
unreadable, not UTF-8 text, malformed YAML) becomes one `InputError` naming the file and the fix, so
each loader does not repeat the same checks and none of them can end in a traceback.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from gpuwise.errors import InputError


def read_text(path: str | Path, field: str, kind: str = "text file") -> str:
    """Contents of `path` as text.

    field: what the CLI calls this input (e.g. "JOB", "--workload"), shown first in the error.
    kind: what the file should be (e.g. "job spec YAML"), used in the fix text."""
    p = Path(path)
    if not p.exists():
        raise InputError(field, str(path), "file not found; check the path")
    if p.is_dir():
        raise InputError(field, str(path), f"is a folder; give the path of a {kind}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(field, str(path), f"not UTF-8 text (byte {exc.start}); give a {kind}") from None
    except OSError as exc:  # permissions, special files
        raise InputError(field, str(path), f"cannot be read ({exc.strerror or exc}); give a readable {kind}") from None


def load_yaml(path: str | Path, field: str, kind: str = "YAML file") -> Any:
    """Parsed YAML of `path` (None for an empty file); syntax errors name the line."""
    import yaml

    text = read_text(path, field, kind)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "somewhere"
        why = " ".join(str(getattr(exc, "problem", None) or exc).split())   # one line
        raise InputError(str(path), where, f"not valid YAML ({why})") from None


# ------------------------------------------------------------------ typed rows of a user's table
# One set of pydantic helpers for every file a user supplies (cluster, job spec, workload trace, rent
# trace, cloud catalog): the same strict base, the same field checks and `errors.validation_error` for
# the one-line message. Built on first use so that commands reading no such file skip pydantic's import.


def strict_base(text_cells: bool = False) -> type:
    """Base of the models of a user's file: unknown keys are typos (refused with the closest valid
    key) and NaN/inf are never a count, time, size or price. ``text_cells``: every value the model gets
    is text (a CSV reader's cells), so no true/false can reach a number: the base without that check,
    whose Python call per cell is most of a large catalog's validation."""
    return _strict_base(bool(text_cells))


@lru_cache(maxsize=2)     # one class per kind (strict_base() and strict_base(False) are the same class)
def _strict_base(text_cells: bool) -> type:
    from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

    config = ConfigDict(extra="forbid", allow_inf_nan=False)
    if text_cells:
        class TextStrict(BaseModel):
            model_config = config

        return TextStrict

    class Strict(BaseModel):
        model_config = config

        @field_validator("*", mode="before")
        @classmethod
        def _no_bool_numbers(cls, v: Any, info: ValidationInfo) -> Any:
            """true/false is not a count or an amount (pydantic would read true as 1)."""
            if isinstance(v, bool) or (isinstance(v, list) and any(isinstance(x, bool) for x in v)):
                if _numbers_only(cls.model_fields[info.field_name].annotation):
                    raise ValueError("give a number, not true/false")
            return v

    return Strict


def _numbers_only(annotation: Any) -> bool:
    """Whether a field's type admits numbers (and None, lists of numbers) but no bool or other type."""
    from typing import get_args

    todo, leaves = [annotation], set()
    while todo:
        t = todo.pop()
        args = get_args(t)
        if args:
            todo.extend(args)
        else:
            leaves.add(t)
    return bool(leaves & {int, float}) and leaves <= {int, float, type(None)}


def whole_number(v: Any) -> Any:
    """For a ``mode="before"`` validator: 4, 4.0 and "4" are 4; 2.5, "two" and booleans are refused
    (range checks stay with the field's ge/gt)."""
    if v is None:
        return v
    if isinstance(v, bool):
        raise ValueError("give a whole number")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError("give a whole number") from None
    if f != f or f in (float("inf"), float("-inf")) or f != int(f):
        raise ValueError("give a whole number")
    return int(f)


def known_name(value: Any, choices: Iterable[str]) -> str:
    """For a validator: ``value`` if it is one of ``choices``, else ValueError with the closest names."""
    from gpuwise.errors import did_you_mean

    text = str(value).strip()
    if text not in set(choices):
        raise ValueError(did_you_mean(text, choices))
    return text


def validate_row(model: type, row: dict, where: str, context: dict | None = None) -> Any:
    """``row`` (a CSV row or a YAML mapping) as an instance of the pydantic ``model``. Text is stripped
    and blank cells of the model's fields are absent. Errors: one InputError naming ``where`` (file and
    row), the column, the bad value and the fix (unknown columns with the closest valid one).
    ``context`` reaches the model's validators (e.g. the names valid in this file)."""
    fields = model.model_fields
    data = {}
    for k, v in row.items():
        key = k.strip() if isinstance(k, str) else k
        v = v.strip() if isinstance(v, str) else v
        if not (key in fields and (v is None or v == "")):
            data[key] = v
    return validate_cells(model, data, where, context)


def validate_cells(model: type, data: dict, where: str | Callable[[], str], context: dict | None = None) -> Any:
    """`validate_row` of a row already cleaned (text stripped, blank cells of the model's fields absent),
    for readers of large files (catalogs have 10^4-10^5 rows); ``where`` may be a function giving the
    text, called only for an error."""
    try:
        return model.model_validate(data, context=context)
    except Exception as exc:    # imports kept off the per-row path
        from pydantic import ValidationError

        from gpuwise.errors import validation_error

        if not isinstance(exc, ValidationError):
            raise
        raise validation_error(exc, model, where() if callable(where) else where, " column ") from None


def check_sorted(times: Sequence[float], where: Callable[[int], str], what: str = "arrival time") -> None:
    """Rows must come in time order: the first row (1-based, named by ``where(row)``) earlier than
    the one before it is refused."""
    for i in range(1, len(times)):
        if times[i] < times[i - 1]:
            raise InputError(where(i + 1), times[i], f"rows must be sorted by {what} (row {i} has {times[i - 1]:g})")


def table_cell(raw: Any, kind: Callable, field: str, optional: bool = False) -> Any:
    """One cell of a user's CSV/YAML table as ``kind`` (None where empty and ``optional``); a missing
    or unconvertible value is an InputError naming ``field`` ("FILE row N column C")."""
    col = field.rsplit(" ", 1)[-1]
    if raw in (None, ""):
        if optional:
            return None
        raise InputError(field, "", f"give a value for {col}")
    try:
        return kind(raw)
    except (TypeError, ValueError):
        raise InputError(field, raw, f"give a {kind.__name__}") from None
