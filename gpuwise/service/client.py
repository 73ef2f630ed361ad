"""A small HTTP client of the job service, for `gpuwise submit`, `jobs` and `cancel`.

Server and token: ``--server``/``GPUWISE_SERVER`` and ``GPUWISE_TOKEN``, else the config file
``$GPUWISE_HOME/config.yaml`` (``~/.gpuwise/config.yaml``) with keys ``server`` and ``token``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuwise.errors import InputError, Missing

DEFAULT_SERVER = "http://127.0.0.1:8765"


def config_path() -> Path:
    return Path(os.environ.get("GPUWISE_HOME") or Path.home() / ".gpuwise") / "config.yaml"


def _config() -> dict:
    p = config_path()
    if not p.exists():
        return {}
    from gpuwise.user_files import load_yaml

    data = load_yaml(p, str(p), "YAML mapping with server and token")
    if not isinstance(data, dict):
        raise InputError(str(p), type(data).__name__, "write a mapping: server: URL, token: TOKEN")
    return data


def settings(server: str | None) -> tuple[str, str]:
    cfg = _config()
    url = server or os.environ.get("GPUWISE_SERVER") or cfg.get("server") or DEFAULT_SERVER
    token = os.environ.get("GPUWISE_TOKEN") or cfg.get("token")
    if not token:
        raise Missing("token", "GPUWISE_TOKEN", "run gpuwise token create USER and the export GPUWISE_TOKEN=... "
                      f"line it prints (or put token: in {config_path()})")
    if not str(url).startswith(("http://", "https://")):
        raise InputError("--server", url, "give an http:// or https:// URL")
    return str(url).rstrip("/"), str(token)


class ServiceError(Exception):
    def __init__(self, status: int, detail: Any):
        self.status, self.detail = status, detail
        msg = detail.get("message") if isinstance(detail, dict) else detail
        super().__init__(f"HTTP {status}: {msg}")


def call(method: str, server: str | None, path: str, *, content: bytes | None = None,
         content_type: str | None = None, timeout: float = 60.0) -> dict:
    """One request; HTTP errors become ServiceError (422 bodies: InputError with the server's words)."""
    import httpx

    url, token = settings(server)
    headers = {"Authorization": f"Bearer {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    try:
        r = httpx.request(method, url + path, content=content, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise InputError("--server", url, f"cannot reach it ({exc}); start gpuwise serve or fix the URL") from None
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {"detail": r.text}
    if r.status_code == 422 and isinstance(body.get("detail"), dict) and "field" in body["detail"]:
        d = body["detail"]
        raise InputError(d["field"], d["value"], d["fix"])
    if r.status_code >= 400:
        raise ServiceError(r.status_code, body.get("detail"))
    return body


def job_id(server: str | None, text: str) -> str:
    """A full job id from a unique start of it (the dashboard shows 8 characters). Text that is no
    id prefix, or starts no job of the caller's, is returned as it is: the server answers 404."""
    from urllib.parse import quote

    prefix = text.strip().lower()
    if len(prefix) >= 32 or not is_id_prefix(prefix):
        return text
    ids = call("GET", server, f"/v1/job-ids?prefix={quote(prefix)}")["ids"]
    if len(ids) > 1:
        shown = ", ".join(i[:12] for i in ids[:3])
        raise InputError("ID", text, f"is the start of {len(ids) if len(ids) < 10 else '10 or more'} "
                         f"job ids ({shown}...); give more characters")
    return ids[0] if ids else text


def is_id_prefix(text: str) -> bool:
    """Job ids are 32 lowercase hex digits."""
    return 0 < len(text) <= 32 and all(ch in "0123456789abcdef" for ch in text)
