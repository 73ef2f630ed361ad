"""User-facing input errors.

Every bad input becomes one `InputError` naming the field, the bad value and the fix; the CLI
prints its message on one line and exits with code 2 (never a traceback).
"""

from __future__ import annotations

import difflib
import re
from typing import Iterable


class InputError(ValueError):
    """A bad value supplied by the user (flag, file, field)."""

    def __init__(self, field: str, value: object, fix: str):
        self.field, self.value, self.fix = field, value, fix
        super().__init__(f"{field}: {short_repr(value)} is invalid; {fix}")


def short_repr(value: object, limit: int = 100) -> str:
    """repr of a bad value, cut so that a whole parsed file never fills the one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...)"


class Infeasible(InputError):
    """Valid input with no feasible answer (exit code 1, not 2): `field` is the binding constraint and
    `fix` names the nearest feasible option. A subclass of InputError so callers that skip infeasible
    points (e.g. budget sweeps) keep working."""

    exit_code = 1

    def __init__(self, field: str, value: object, fix: str):
        super().__init__(field, value, fix)
        self.args = (f"no feasible answer: {field} = {short_repr(value)} binds; {fix}",)

    def __str__(self) -> str:
        return self.args[0]


class Missing(InputError):
    """A required input that was not given at all: "no WHAT: FIX" reads better than "X: None is invalid"."""

    def __init__(self, what: str, field: str, fix: str):
        super().__init__(field, None, fix)
        self.args = (f"no {what}: {fix}",)

    def __str__(self) -> str:
        return self.args[0]


# a size in a name: "72b", "7b", "1.5b", "350m" (parameters), "80gb" (memory)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|m|gb)(?![a-z])", re.I)
_SCALE = {"m": 1e-3, "b": 1.0, "gb": 1.0}


def _size(name: str) -> tuple[str, float] | None:
    m = _SIZE.search(name)
    return (m.group(2).lower().replace("m", "b"), float(m.group(1)) * _SCALE[m.group(2).lower()]) if m else None


def plausible(value: str, candidate: str) -> bool:
    """A close spelling is no suggestion when both names state a size more than 2x apart: qwen2.5-72b is
    not a typo of qwen2.5-7b (10x the parameters), while llama-3.1-7b may well mean llama-3.1-8b."""
    a, b = _size(value), _size(candidate)
    if a is None or b is None or a[0] != b[0]:
        return True
    return max(a[1], b[1]) <= 2 * max(min(a[1], b[1]), 1e-12)


def did_you_mean(value: str, choices: Iterable[str], n: int = 3, otherwise: str | None = None) -> str:
    """'did you mean X, Y?' text with the closest plausible valid names; when there are none,
    ``otherwise`` (how to give what is not in the list) or the valid names if few."""
    choices = sorted(set(choices))
    close = [c for c in difflib.get_close_matches(value, choices, n=n, cutoff=0.4) if plausible(value, c)]
    if not close:
        lowered = value.lower()
        close = [c for c in choices if (lowered in c.lower() or c.lower() in lowered) and plausible(value, c)][:n]
    if close:
        return "did you mean " + ", ".join(close) + "?"
    if otherwise:
        return otherwise
    if len(choices) <= 12:
        return "valid: " + ", ".join(choices)
    return f"valid names: {', '.join(choices[:12])}, ... ({len(choices)} in all)"


def unknown_name(field: str, value: str, choices: Iterable[str], otherwise: str | None = None) -> InputError:
    return InputError(field, value, did_you_mean(value, choices, otherwise=otherwise))


def unknown_key(field: str, key: object, valid: Iterable[str]) -> InputError:
    """An unknown key in a user's YAML/JSON mapping, with the closest valid key(s)."""
    return InputError(field, key, "unknown key; " + did_you_mean(str(key), valid))


def first_unknown_key(exc: Exception, model: type, where: str = "", sep: str = ": ") -> InputError | None:
    """The first `extra_forbidden` error of a pydantic ValidationError as an `unknown_key` error.

    Unknown keys are reported before missing ones: a misspelled `trainig:` is the cause of the
    "training is missing" that pydantic lists first. `model` is the pydantic class validated; the
    valid keys at the error's location are read from its (nested) fields."""
    errors = getattr(exc, "errors", lambda: [])()
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), None)
    if err is None:
        return None
    loc = tuple(err.get("loc", ()))
    cls = model
    for part in loc[:-1]:   # walk nested models (skipping list indices and union tags)
        field = getattr(cls, "model_fields", {}).get(part) if isinstance(part, str) else None
        if field is not None:
            cls = _model_in(field.annotation) or cls
    valid = list(getattr(cls, "model_fields", {}))
    path = loc_path(loc)
    return unknown_key(f"{where}{sep}{path}" if where else path, loc[-1] if loc else "?", valid)


def _model_in(annotation: object) -> type | None:
    """The pydantic model class inside an annotation such as Optional[Model] or list[Model]."""
    import typing

    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def validation_error(exc: Exception, model: type, where: str, sep: str = ": ") -> InputError:
    """One InputError from a pydantic ValidationError of a user's file: an unknown key first (with the
    closest valid key), else the first error, naming the file, the field's path and the value.
    ``sep`` joins ``where`` and the field (" column " for a row of a table)."""
    unknown = first_unknown_key(exc, model, where, sep)
    if unknown is not None:
        return unknown
    err = exc.errors()[0]   # type: ignore[attr-defined]
    path = loc_path(err.get("loc", ()))
    field = f"{where}{sep}{path}" if path else where
    if err.get("type") == "missing":
        return InputError(field, None, "required field is missing")
    return InputError(field, err.get("input"), _fix(err))


# pydantic's error types -> the fix a user reads (the rest: pydantic's own words, lower-cased)
_FIXES = {"greater_than_equal": "give a number >= {ge:g}", "greater_than": "give a number > {gt:g}",
          "less_than_equal": "give a number <= {le:g}", "finite_number": "give a finite number",
          "float_parsing": "give a number", "float_type": "give a number", "int_parsing": "give a whole number",
          "int_type": "give a whole number", "int_from_float": "give a whole number"}


def _fix(err: dict) -> str:
    template = _FIXES.get(str(err.get("type")))
    if template is not None:
        try:
            return template.format(**(err.get("ctx") or {}))
        except (KeyError, ValueError, TypeError):
            pass
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def loc_path(loc) -> str:
    """A pydantic error location as the YAML path a user reads: nodes[0].count (the labels pydantic
    adds for the branches of a union, e.g. ``float``, ``dict[str,float]``, ``function-after[...]``,
    are left out: they are no key of the file)."""
    out = ""
    for part in loc:
        if isinstance(part, str) and (part in _BRANCH_LABELS or "[" in part):
            continue
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


_BRANCH_LABELS = {"str", "float", "int", "bool", "function-after", "function-before", "function-plain"}
