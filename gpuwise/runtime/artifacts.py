"""A job's artifacts: the files under its folder (``<state>/jobs/<job>/``: checkpoints/, logs/),
listed and opened for the service without ever leaving that folder.

What is listed is only regular files reached without a link: a user's script writes into its
job's folder, so a link it leaves there must not let the server read another file for a client.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_LISTED = 1000        # files listed per job (the newest checkpoints and logs come first)
MAX_WALKED = 20000       # files looked at per listing: a script that writes millions cannot stall a page
LOG_TAIL_BYTES = 8192    # how much of each rank's log the job page shows
SHOWN = ("checkpoints", "logs")   # the control/ folders are the runtime's own handshake files


@dataclass(frozen=True)
class Artifact:
    path: str            # relative to the job's folder, with "/"
    bytes: int
    modified_s: float    # the file's mtime (Unix seconds)

    def to_json(self) -> dict:
        return {"path": self.path, "bytes": self.bytes, "modified_s": round(self.modified_s, 3)}


def _regular(path: Path) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except (OSError, ValueError):        # gone, too long a name, an embedded NUL
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _real_folder(folder: Path) -> bool:
    """The job's folder itself is a directory, not a link (to another job's folder)."""
    try:
        return stat.S_ISDIR(os.lstat(folder).st_mode)
    except (OSError, ValueError):
        return False


def list_artifacts(folder: Path, limit: int = MAX_LISTED) -> list[Artifact]:
    """The job's checkpoints and logs, newest first; links and other non-files are skipped. At most
    MAX_WALKED files and folders are looked at."""
    found: list[Artifact] = []
    walked = 0
    if not _real_folder(folder):
        return found
    for top in SHOWN:
        base = folder / top
        if not base.is_dir() or base.is_symlink():
            continue
        for root, dirs, files in os.walk(base, followlinks=False):
            dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
            walked += len(files) + len(dirs)
            if walked > MAX_WALKED:
                break
            for name in files:
                p = Path(root) / name
                if (st := _regular(p)) is not None:
                    found.append(Artifact(p.relative_to(folder).as_posix(), st.st_size, st.st_mtime))
    found.sort(key=lambda a: (-a.modified_s, a.path))
    return found[:limit]


def artifact_file(folder: Path, rel: str) -> Path | None:
    """The file ``rel`` names in the job's folder, or None where it is not one of its listed artifacts
    (absolute, ``..``, a link on the way, outside checkpoints/ and logs/, not a regular file)."""
    parts = rel.split("/")
    if (not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel or parts[0] not in SHOWN
            or any(p in ("", ".", "..") for p in parts) or not _real_folder(folder)):
        return None
    path = folder
    try:
        for part in parts:
            path = path / part
            if path.is_symlink():
                return None
    except (OSError, ValueError):
        return None
    return path if _regular(path) is not None else None


def open_artifact(folder: Path, rel: str):
    """``artifact_file`` opened for reading without following a link put there after the check
    (O_NOFOLLOW) and without blocking on a FIFO; None where it is none, or no longer a regular file."""
    path = artifact_file(folder, rel)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        return None
    return f


def log_tails(folder: Path, max_bytes: int = LOG_TAIL_BYTES, artifacts: list[Artifact] | None = None) -> dict[str, str]:
    """The last ``max_bytes`` of each log under logs/ (name -> text), for the job page (``artifacts``:
    the folder's listing when the caller has it already)."""
    tails: dict[str, str] = {}
    listed = list_artifacts(folder) if artifacts is None else artifacts
    for a in sorted(listed, key=lambda a: a.path):
        if not a.path.startswith("logs/"):
            continue
        f = open_artifact(folder, a.path)
        if f is None:
            continue
        try:
            with f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - max_bytes))
                tails[a.path[len("logs/"):]] = f.read(max_bytes).decode("utf-8", "replace")
        except OSError:            # unreadable: left out, the page still renders
            continue
    return tails
