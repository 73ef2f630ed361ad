"""User-facing input errors.

Every bad input becomes one `InputError` naming the field, the bad value and the fix; the CLI
prints its message on one line and exits with code 2 (never a traceback).
"""

from __future__ import annotations

import difflib
from typing import Iterable


class InputError(ValueError):
    """A bad value supplied by the user (flag, file, field)."""

    def __init__(self, field: str, value: object, fix: str):
        self.field, self.value, self.fix = field, value, fix
        super().__init__(f"{field}: {value!r} is invalid; {fix}")


def did_you_mean(value: str, choices: Iterable[str], n: int = 3) -> str:
    """'did you mean X, Y?' text with the closest valid names (or the valid names if few)."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(value, choices, n=n, cutoff=0.4)
    if not close:
        lowered = value.lower()
        close = [c for c in choices if lowered in c.lower() or c.lower() in lowered][:n]
    if close:
        return "did you mean " + ", ".join(close) + "?"
    if len(choices) <= 12:
        return "valid: " + ", ".join(choices)
    return f"valid names: {', '.join(choices[:12])}, ... ({len(choices)} in all)"


def unknown_name(field: str, value: str, choices: Iterable[str]) -> InputError:
    return InputError(field, value, did_you_mean(value, choices))
