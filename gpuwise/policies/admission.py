"""Admission: what happens to a new job that the allocator could not fit.

- ``queue``: it waits and is reconsidered at later rounds (the default).
- ``drop``: it is refused at once (the elastic-scaling paper's claim 8: admit-with-rescale or drop).
"""

from __future__ import annotations

from gpuwise.errors import InputError

ADMISSIONS = ("queue", "drop")


def check_admission(name: str) -> str:
    if name not in ADMISSIONS:
        raise InputError("--admission", name, "use queue or drop")
    return name


def refused(admission: str, new: list[str], granted: set[str]) -> list[str]:
    """New jobs to drop: under ``drop`` every new job without an allocation; under ``queue`` none."""
    if admission == "drop":
        return [n for n in new if n not in granted]
    return []
