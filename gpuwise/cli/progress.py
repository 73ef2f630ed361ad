"""Progress on long work: a Rich bar (or a live status when the total is unknown) on a terminal only.

Shown on stderr when stderr is a TTY and the command was not asked for --json; silent otherwise, so
pipes, files, CI logs and machine output stay clean. Lower layers never import the CLI: they take an
optional `on_progress(done, total)` callback, and the CLI passes `Progress.callback` when it wants a bar.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

# what lower layers accept: called with (units done so far, total units or None)
ProgressCallback = Callable[[int, Optional[int]], None]


def wanted(args=None) -> bool:
    """True on a terminal and not under --json."""
    if args is not None and getattr(args, "json", False):
        return False
    return sys.stderr.isatty()


class Progress:
    """A handle on one progress display: `advance()`, `set(done, total)`, or `callback` for lower layers."""

    def __init__(self, bar=None, task=None):
        self._bar, self._task = bar, task

    def advance(self, n: int = 1, description: str | None = None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=n, **({"description": description} if description else {}))

    def set(self, done: int, total: int | None = None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, **({"total": total} if total is not None else {}))

    def callback(self, done: int, total: int | None) -> None:
        self.set(done, total)


@contextmanager
def progress(description: str, total: int | None = None, *, enabled: bool) -> Iterator[Progress]:
    """A transient Rich progress bar on stderr while the block runs (a no-op handle when not enabled)."""
    if not enabled:
        yield Progress()
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)

    with Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
             TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        yield Progress(bar, bar.add_task(description, total=total))
