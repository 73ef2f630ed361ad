"""One writer per store (`gpuwise serve` on a database, `gpuwise run` on a state folder), and
store files only their owner reads.

Two schedulers on one store would each start every job. The lock is ``flock`` on a file next to the
store: the kernel drops it when its process ends, however it ends, so a crashed process leaves no
stale lock behind. The file holds the holder's pid, for the refusal's message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gpuwise.errors import InputError


def owner_only(path: Path) -> None:
    """Create a database file 0600 before SQLite does (it would follow the umask: world-readable);
    SQLite gives its WAL and shared-memory files the same mode. An old file is tightened."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    st = path.stat()
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        path.chmod(0o600)


class WriterLock:
    """Held from construction to `release` (or the end of the process)."""

    def __init__(self, path: Path, field: str, value: str, who: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self._fd, 32).decode(errors="replace").strip() or "?"
            self.release()
            raise InputError(field, value, f"another {who} (pid {holder}) is using it; stop that one "
                             f"or give another {field}") from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, str(os.getpid()).encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)      # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
