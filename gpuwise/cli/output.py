"""Rendering helpers shared by the commands: JSON for machines, Rich tables for people."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any, Iterable, Sequence


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if hasattr(obj, "tolist"):  # numpy scalars / arrays
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def _clean(obj: Any) -> Any:
    """Replace NaN/inf (not valid JSON) by None, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def emit_json(obj: Any) -> None:
    """Print `obj` as JSON (strict: NaN and infinities become null)."""
    text = json.dumps(obj, default=_default)
    sys.stdout.write(json.dumps(_clean(json.loads(text)), indent=2) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
                justify: Sequence[str] | None = None) -> None:
    """A Rich table (imported lazily so JSON paths stay fast)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify=(justify[i] if justify else ("left" if i == 0 else "right")))
    for row in rows:
        table.add_row(*[("" if v is None else str(v)) for v in row])
    # Pipes get a wide console so rows are not cut; terminals keep their own width.
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


# Human output puts the answer first; the assumption lines (often ten or more) behind --verbose.
# `gpuwise.cli.main` sets this from every command's --verbose flag; --json always lists them all.
_VERBOSE = False


def pct(v, signed: bool = False) -> str:
    """A relative value as a percentage for tables ('' for None); `signed`: with its sign (errors)."""
    return "" if v is None else f"{100 * v:+.1f}%" if signed else f"{100 * v:.1f}%"


def set_verbose(on: bool) -> None:
    global _VERBOSE
    _VERBOSE = bool(on)


def print_assumptions(assumptions: Iterable[str]) -> None:
    """Every assumption under --verbose; otherwise one line saying how many there are and how to see them."""
    items = list(assumptions)
    if not items:
        return
    if not _VERBOSE:
        print(f"({len(items)} assumption{'s' if len(items) != 1 else ''} behind this answer: "
              "add --verbose to print them; --json lists them all)")
        return
    print("Assumptions:")
    for a in items:
        print(f"  - {a}")


def check_output_file(flag: str, path: str, suffixes: Sequence[str]) -> None:
    """Refuse an output path before any work is done: wrong extension, a folder, or a missing folder.

    flag: the option naming the path (e.g. "--plot"); suffixes: accepted extensions, e.g. (".png", ".svg")."""
    from pathlib import Path

    from gpuwise.errors import InputError

    p = Path(path)
    if p.is_dir():
        raise InputError(flag, path, f"is a folder; give a file name ending in {' or '.join(suffixes)}")
    if p.suffix.lower() not in suffixes:
        raise InputError(flag, path, f"give a file name ending in {' or '.join(suffixes)}")
    if not p.resolve().parent.is_dir():
        raise InputError(flag, path, f"folder {p.parent} does not exist; create it or write elsewhere")
