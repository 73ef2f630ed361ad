"""Bundled data files (see README.md in this folder for sources and licences)."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def data_path(*parts: str) -> Path:
    """Path of a bundled data file, e.g. data_path("pollux", "traces", "bert", "placements.csv")."""
    return DATA_DIR.joinpath(*parts)
