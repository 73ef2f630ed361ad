"""Bundled data files (see README.md in this folder for sources and licences)."""

from __future__ import annotations

import csv
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def data_path(*parts: str) -> Path:
    """Path of a bundled data file, e.g. data_path("pollux", "traces", "bert", "placements.csv")."""
    return DATA_DIR.joinpath(*parts)


def read_commented_csv(path: Path | str) -> list[dict[str, str]]:
    """Rows of a CSV whose lines starting with '#' are comments (how our data files carry their
    conventions and sources above the header)."""
    with open(path, newline="") as fh:
        return list(csv.DictReader(line for line in fh if not line.lstrip().startswith("#")))
