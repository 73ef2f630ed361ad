"""The one way `gpuwise submit`, `jobs` and `cancel` talk to a job server and print its answer."""

from __future__ import annotations

import argparse
from typing import Callable


def answer(command: str, args: argparse.Namespace, method: str, path: str | Callable[[], str],
           render: Callable[[dict], None], *,
           content: bytes | None = None, content_type: str | None = None,
           enrich: Callable[[dict], dict] | None = None) -> int:
    """One request to ``args.server``. A refusal by the server (ServiceError: valid input it cannot
    serve, e.g. 409 already cancelled) is one line on stderr and exit 1; bad input (InputError, e.g.
    no token, 422) propagates to the CLI's exit 2. Under ``--json`` the server's answer is printed as
    it is, else ``render(answer)`` prints it. ``path`` may be a function (it may call the server too,
    e.g. to resolve a short job id), called inside the same error handling, as is ``enrich``."""
    import sys

    from gpuwise.service.client import ServiceError, call

    try:
        res = call(method, args.server, path() if callable(path) else path, content=content,
                   content_type=content_type)
        if enrich is not None:      # more requests about the answer (a job's events, files): one error path
            res = enrich(res)
    except ServiceError as exc:
        sys.stderr.write(f"gpuwise {command}: {exc}\n")
        return 1
    if getattr(args, "json", False):
        from gpuwise.cli.output import emit_json

        emit_json(res)
    else:
        render(res)
    return 0
