"""Reading the files a user names (job specs, job-type lists, clusters, workloads, measured rows).

Base layer, next to `gpuwise.errors`: every way such a file can fail to be read (missing, a folder,
unreadable, not UTF-8 text, malformed YAML) becomes one `InputError` naming the file and the fix, so
each loader does not repeat the same checks and none of them can end in a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
