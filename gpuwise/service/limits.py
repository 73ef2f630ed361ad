"""What a client may send the service, and how long it may take to send it.

The API reads no more than `MAX_BODY_BYTES` of a body (refused from Content-Length before reading,
or as soon as the stream passes it), within `read_timeout_s` for the headers (`TimedH11Protocol`)
and again for the body; YAML without aliases (a 450-byte alias bomb expands to hundreds of MB);
parsed data at most `MAX_DEPTH` deep, strings at most `MAX_STRING` characters, numbers finite and
at most `MAX_NUMBER`; a model is a preset or numbers given inline, never a path on the server.
CPU-bound work (parsing, planning, predicting) runs off the event loop, at most `HEAVY_AT_ONCE`
requests at a time, so `/v1/health` (served on the loop itself) always answers.
"""

from __future__ import annotations

import asyncio
import json
import math
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import HTTPException, Request

from gpuwise.errors import InputError, short_repr

MAX_BODY_BYTES = 256 * 1024      # a job spec is a few KB
MAX_DEPTH = 12                   # a job spec nests 3 levels
MAX_STRING = 1024
MAX_NUMBER = 1e18                # above any real amount of tokens, FLOPs or dollars
MAX_NODES = 10_000               # mapping entries and list items in all
MAX_ECHO = 200                   # characters of a bad value echoed back in an error
HEAVY_AT_ONCE = 2                # CPU-bound requests at once (parse, plan, predict): more only share the GIL
HEAVY_WAITING = 256              # more waiting than this: 503, retry later
DEFAULT_READ_TIMEOUT_S = 10.0


def echo(value: Any) -> Any:
    """``value`` as a 422 may show it: JSON-safe (no NaN) and short (a parsed body is never echoed whole)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return short_repr(value, MAX_ECHO)
    return value if len(text) <= MAX_ECHO else short_repr(value, MAX_ECHO)


async def read_body(request: Request, timeout_s: float) -> bytes:
    """The body, refused with 413 past `MAX_BODY_BYTES` (before reading it when Content-Length says
    so) and 408 if it takes longer than ``timeout_s`` to arrive."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _too_large(int(declared))
    chunks, size = [], 0
    stream = request.stream()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in stream:
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise _too_large(size)
                chunks.append(chunk)
    except TimeoutError:
        raise HTTPException(408, f"the body took over {timeout_s:g} s to arrive; send it at once") from None
    return b"".join(chunks)


def _too_large(size: int) -> HTTPException:
    return HTTPException(413, f"body of {size:,} bytes is over the {MAX_BODY_BYTES // 1024} KiB limit; "
                              "a job spec is a few KB", headers={"Connection": "close"})


def flow_depth(text: str) -> int:
    """Deepest nesting of ``[`` / ``{`` outside quotes: JSON, and YAML's flow style (checked before
    parsing: the parsers recurse once per level)."""
    depth = deepest = 0
    quote, escaped = None, False
    for ch in text:
        if escaped:
            escaped = False
        elif quote:
            escaped = ch == "\\" and quote == '"'
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def load_yaml_text(text: str) -> Any:
    """YAML with the safe loader, aliases refused (``*name`` copies a node: nested ones expand
    exponentially)."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                line = self.peek_event().start_mark.line + 1
                raise InputError("body", f"line {line}", "YAML aliases (*name) are not accepted by the API; "
                                 "write the value out")
            return super().compose_node(parent, index)

    loader = NoAliasLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def check_tree(data: Any) -> None:
    """Bounds on parsed data, the offending field named by its path (``training.global_batch``)."""
    todo: list[tuple[str, Any, int]] = [("", data, 0)]
    nodes = 0
    while todo:
        path, v, depth = todo.pop()
        nodes += 1
        where = path or "body"
        if nodes > MAX_NODES:
            raise InputError("body", f"over {MAX_NODES} values", "a job spec has a few dozen; send one job spec")
        if depth > MAX_DEPTH:
            raise InputError(where, f"nested {depth} deep", f"nest at most {MAX_DEPTH} levels (a job spec has 3)")
        if isinstance(v, str) and len(v) > MAX_STRING:
            raise InputError(where, f"{len(v):,} characters", f"give at most {MAX_STRING} characters")
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(where, str(v), "give a finite number")
        if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > MAX_NUMBER:
            raise InputError(where, f"{float(v):.3g}", f"give a number of at most {MAX_NUMBER:.0e}")
        if isinstance(v, dict):
            for k, x in v.items():
                key = str(k)
                if len(key) > MAX_STRING:
                    raise InputError(where, f"a key of {len(key):,} characters", "use the schema's field names")
                todo.append((f"{path}.{key}" if path else key, x, depth + 1))
        elif isinstance(v, list):
            todo.extend((f"{path}[{i}]", x, depth + 1) for i, x in enumerate(v))


def check_model(model: Any, field: str = "model") -> None:
    """A model over the API is a preset name or inline numbers: the server reads no file a client names
    (nor says whether one exists), and caches only the bundled presets."""
    from gpuwise.runtime.small_models import small_models
    from gpuwise.workload.models import list_presets

    known = {*list_presets(), *small_models()}          # the bundled presets and the Ray backend's models
    if isinstance(model, str) and model.strip().lower() not in known:
        raise InputError(field, model, "over the API give a preset name (gpuwise models) or the model "
                         "inline as {name, params, flops_per_sample, activation_bytes_per_sample}; the server "
                         "reads no file paths")


USER_PATH_FIELDS = ("entrypoint", "data", "weights", "tokenizer")


def check_user_paths(spec, inputs_dir: str | None):
    """Files a job spec names over the API (``entrypoint``, ``data``, ``weights``, ``tokenizer``) may only
    be inside the operator's ``serve --inputs-dir``, named relative to it: no absolute path, no ``..``, no
    link out of it. Returns the spec with those paths made absolute inside the folder. Without an inputs
    folder the server runs no client-named file (any path is refused, whether or not it exists)."""
    import shlex
    from pathlib import Path, PurePosixPath

    given = {f: getattr(spec, f) for f in USER_PATH_FIELDS if getattr(spec, f, None)}
    if not given:
        return spec
    if inputs_dir is None:
        f = next(iter(given))
        raise InputError(f, given[f], "this server runs no files a client names; its operator can allow a "
                         "folder with gpuwise serve --inputs-dir DIR, then name files relative to it")
    root = Path(inputs_dir).resolve()
    fixed = {}
    for f, value in given.items():
        argv = shlex.split(value) if f == "entrypoint" else [value]
        rel = PurePosixPath(argv[0]) if argv else PurePosixPath("")
        target = (root / rel).resolve()
        if not argv or rel.is_absolute() or ".." in rel.parts or str(rel).startswith("~") \
                or not target.is_relative_to(root):
            raise InputError(f, short_repr(value), "name a file inside the server's inputs folder, relative to it "
                             "(no absolute path, no '..')")
        fixed[f] = shlex.join([str(target), *argv[1:]]) if f == "entrypoint" else str(target)
    return spec.model_copy(update=fixed)


class Heavy:
    """At most `HEAVY_AT_ONCE` CPU-bound requests at once; past `HEAVY_WAITING` waiting, 503."""

    def __init__(self, at_once: int = HEAVY_AT_ONCE, waiting: int = HEAVY_WAITING) -> None:
        self.at_once, self.max_waiting, self.waiting = at_once, waiting, 0
        self._sem: asyncio.Semaphore | None = None

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._sem is None:               # created on the server's loop
            self._sem = asyncio.Semaphore(self.at_once)
        if self.waiting >= self.max_waiting:
            raise HTTPException(503, f"{self.waiting} requests are waiting; retry in a few seconds",
                                headers={"Retry-After": "5"})
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._sem.release()


class PrivatePages:
    """ASGI middleware: a page reached with ``?token=`` is neither cached nor named in a Referer."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        from urllib.parse import parse_qs

        if scope["type"] != "http" or "token" not in parse_qs(scope.get("query_string", b"").decode("latin-1")):
            return await self.app(scope, receive, send)

        async def send_private(message) -> None:
            if message["type"] == "http.response.start":   # added where the route did not set them itself
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in ((b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer"))
                            if k not in have]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_private)


def timed_protocol(read_timeout_s: float) -> type:
    """uvicorn's h11 protocol that closes a connection whose request headers have not all arrived
    ``read_timeout_s`` after it opened or after its previous response (slowloris)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._waiting_for = self.cycle
            self._timer = self.loop.call_later(read_timeout_s, self._too_slow)

        def _too_slow(self) -> None:
            if self.cycle is self._waiting_for and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._timer is not None and self.cycle is not self._waiting_for:    # headers complete
                self._timer.cancel()
                self._timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc) -> None:
            if self._timer is not None:
                self._timer.cancel()
            super().connection_lost(exc)

    return TimedH11Protocol
