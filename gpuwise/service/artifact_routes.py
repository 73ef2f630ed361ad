"""A job's artifacts over HTTP: the list (``GET /v1/jobs/{id}/artifacts``) and one file
(``GET /v1/jobs/{id}/artifacts/{path}``, and ``/jobs/{id}/files/{path}`` for the dashboard's
signed-in links). Only the job's owner (or an admin) sees them; a path is served only if it is one
of the listed files (`gpuwise.runtime.artifacts`), never a server path of the client's choosing."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import Response, StreamingResponse

from gpuwise.jobqueue.store import User

NO_ARTIFACTS = "this backend trains nothing and keeps no artifacts; the ray backend keeps checkpoints and logs"


def job_folder(ctx: Any, job_id: str) -> Path | None:
    """The job's artifact folder on this backend, or None where the backend keeps none (sim)."""
    where = getattr(ctx.scheduler.backend, "artifacts_dir", None)
    return where(job_id) if where is not None else None


def _file(ctx: Any, row: dict, path: str) -> StreamingResponse:
    """The artifact, streamed from the file opened once (no link followed after the check)."""
    from gpuwise.runtime.artifacts import open_artifact

    folder = job_folder(ctx, row["id"])
    f = open_artifact(folder, path) if folder is not None else None
    if f is None:
        raise HTTPException(404, f"job {row['id']} has no artifact {path[:200]!r}; "
                                 f"GET /v1/jobs/{row['id']}/artifacts lists them")

    def chunks():
        with f:
            while block := f.read(1 << 20):
                yield block

    kind = "text/plain; charset=utf-8" if path.startswith("logs/") else "application/octet-stream"
    name = quote(path.rsplit("/", 1)[-1])
    return StreamingResponse(chunks(), media_type=kind,
                             headers={"Content-Disposition": f"attachment; filename*=UTF-8''{name}"})


def artifact_routes(app: FastAPI, ctx: Any) -> None:
    def user(authorization: str | None = Header(None)) -> User:
        return ctx.user(authorization)

    @app.get("/v1/jobs/{job_id}/artifacts", tags=["jobs"])
    def list_job_artifacts(job_id: str, u: User = Depends(user)) -> dict[str, Any]:
        """The job's checkpoints and logs (relative paths, bytes, modified time), newest first."""
        from gpuwise.runtime.artifacts import MAX_LISTED, list_artifacts

        row = ctx.visible(job_id, u)
        folder = job_folder(ctx, row["id"])
        if folder is None:
            return {"id": row["id"], "artifacts": [], "note": NO_ARTIFACTS}
        found = list_artifacts(folder)
        note = f"the newest {MAX_LISTED} only" if len(found) == MAX_LISTED else "checkpoints/ and logs/"
        return {"id": row["id"], "artifacts": [a.to_json() for a in found], "note": note}

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"])
    def job_logs(job_id: str, u: User = Depends(user)) -> dict[str, Any]:
        """The last 8 KiB of each worker log (logs/rank<r>.log), by file name."""
        from gpuwise.runtime.artifacts import LOG_TAIL_BYTES, log_tails

        row = ctx.visible(job_id, u)
        folder = job_folder(ctx, row["id"])
        if folder is None:
            return {"id": row["id"], "logs": {}, "note": NO_ARTIFACTS}
        return {"id": row["id"], "logs": log_tails(folder), "note": f"the last {LOG_TAIL_BYTES} bytes of each"}

    @app.get("/v1/jobs/{job_id}/artifacts/{path:path}", tags=["jobs"])
    def get_job_artifact(job_id: str, path: str, u: User = Depends(user)) -> StreamingResponse:
        return _file(ctx, ctx.visible(job_id, u), path)

    @app.get("/jobs/{job_id}/files/{path:path}", tags=["dashboard"])
    def dashboard_artifact(job_id: str, path: str, request: Request,
                           token: str | None = Query(None)) -> Response:
        from gpuwise.service.web import signed_in_user

        found = signed_in_user(ctx, request, token)
        if isinstance(found, Response):
            return found
        return _file(ctx, ctx.visible(job_id, found), path)
