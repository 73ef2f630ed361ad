"""The dashboard's routes: sign-in, the main page, job pages, the cancel button, and short job ids.

Sign-in keeps the token out of URLs: ``POST /login`` takes it in a form body and sets it in an
HttpOnly, SameSite=Strict cookie. Pages also accept ``Authorization: Bearer`` and, for old links,
``?token=``. Every dashboard answer carries ``Cache-Control: no-store`` and
``Referrer-Policy: no-referrer`` (a token in a URL is neither cached nor sent on), and may not be framed.

State-changing forms (cancel, sign-out) need the cookie, a same-origin ``Origin`` when the browser
sends one, and a CSRF field: an HMAC of the session's token, which a page of another site cannot
compute. The cancel button calls the API's own ``DELETE /v1/jobs/{id}`` in-process with the user's
token, so it answers exactly as the API does.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gpuwise.errors import InputError
from gpuwise.jobqueue.store import User
from gpuwise.service import dashboard as dash

COOKIE = "gpuwise_session"
FORM_MAX_BYTES = 4096
HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                                      "frame-ancestors 'none'"}


def csrf_token(token: str) -> str:
    return hmac.new(token.encode(), b"gpuwise-dashboard-csrf", hashlib.sha256).hexdigest()


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def _redirect(to: str) -> RedirectResponse:
    return RedirectResponse(to, status_code=303, headers=HEADERS)


def _credential(request: Request, token: str | None) -> tuple[str, str]:
    """(token, where it came from: header | cookie | query); ("", "") when none was sent."""
    scheme, _, value = (request.headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip(), "header"
    if request.cookies.get(COOKIE):
        return request.cookies[COOKIE], "cookie"
    return (token, "query") if token else ("", "")


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    return origin is None or urlsplit(origin).netloc == request.headers.get("host")


async def _form(request: Request) -> dict[str, str]:
    ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise InputError("Content-Type", ctype, "post the page's form (application/x-www-form-urlencoded)")
    raw = await request.body()
    if len(raw) > FORM_MAX_BYTES:
        raise InputError("body", f"{len(raw)} bytes", f"a form is at most {FORM_MAX_BYTES} bytes")
    return {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}


def _who(ctx: Any, request: Request, token: str | None) -> tuple[User, str, str] | HTMLResponse:
    """(user, token, where it came from), or the sign-in page (401) that replaces the page asked for."""
    tok, where = _credential(request, token)
    try:
        return ctx.user(f"Bearer {tok}"), tok, where
    except HTTPException as exc:
        page = _html(dash.sign_in_page("" if not tok else f"{exc.detail}"), 401)
        if where == "cookie":
            page.delete_cookie(COOKIE, path="/")
        return page


def signed_in_user(ctx: Any, request: Request, token: str | None) -> User | HTMLResponse:
    """The dashboard's user (cookie, or an old link's ?token=), or the sign-in page (401)."""
    found = _who(ctx, request, token)
    return found if isinstance(found, Response) else found[0]


async def _form_user(ctx: Any, request: Request) -> tuple[User, dict[str, str]] | Response:
    """The signed-in user of a state-changing form post, or the page that refuses it."""
    tok = request.cookies.get(COOKIE, "")
    form = await _form(request)
    if not tok:
        return _html(dash.sign_in_page("sign in to do that"), 401)
    if not _same_origin(request) or not hmac.compare_digest(form.get("csrf", ""), csrf_token(tok)):
        return _html(dash.error_page(403, "this form did not come from this dashboard's page; reload it"), 403)
    found = _who(ctx, request, None)
    return found if isinstance(found, Response) else (found[0], form)


def dashboard_routes(app: FastAPI, ctx: Any) -> None:
    """Add the dashboard to ``app``; ``ctx`` is the API's context (store, scheduler, ``user``, ``visible``)."""
    _sign_in_routes(app, ctx)
    _page_routes(app, ctx)
    _cancel_route(app, ctx)
    _id_route(app, ctx)


def _sign_in_routes(app: FastAPI, ctx: Any) -> None:
    @app.get("/login", response_class=HTMLResponse, tags=["dashboard"])
    def login_page() -> HTMLResponse:
        return _html(dash.sign_in_page())

    @app.post("/login", tags=["dashboard"])
    async def login(request: Request) -> Response:
        """Sign in with a token in the form body; sets the HttpOnly, SameSite=Strict session cookie."""
        if not _same_origin(request):
            return _html(dash.error_page(403, "sign in from this dashboard's own page"), 403)
        tok = (await _form(request)).get("token", "").strip()
        try:
            ctx.user(f"Bearer {tok}")
        except HTTPException as exc:
            return _html(dash.sign_in_page(str(exc.detail) if tok else "enter a token"), 401)
        resp = _redirect("/")
        resp.set_cookie(COOKIE, tok, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
        return resp

    @app.post("/logout", tags=["dashboard"])
    async def logout(request: Request) -> Response:
        found = await _form_user(ctx, request)
        if isinstance(found, Response):
            return found
        resp = _redirect("/login")
        resp.delete_cookie(COOKIE, path="/")
        return resp


def _page_routes(app: FastAPI, ctx: Any) -> None:
    @app.get("/", response_class=HTMLResponse, tags=["dashboard"])
    def main_page(request: Request, token: str | None = Query(None, description="API token (old links; "
                                                                   "prefer the sign-in form)")) -> HTMLResponse:
        found = _who(ctx, request, token)
        if isinstance(found, Response):
            return found
        u, tok, where = found
        rows = ctx.store.jobs(None if u.admin else u.id, limit=500)
        done = ctx.store.jobs(None if u.admin else u.id, ("done",))
        return _html(dash.render(u.name, rows, done, ctx.store.usage_series(), ctx.scheduler.snapshot(),
                                 ctx.names(), signed_in=where == "cookie", csrf=csrf_token(tok)))

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, tags=["dashboard"])
    def job_page(job_id: str, request: Request, token: str | None = Query(None)) -> HTMLResponse:
        from gpuwise.service.job_page import render_job

        found = _who(ctx, request, token)
        if isinstance(found, Response):
            return found
        u, tok, where = found
        try:
            row = ctx.visible(job_id, u)
        except HTTPException as exc:
            return _html(dash.error_page(exc.status_code, str(exc.detail)), exc.status_code)
        losses = getattr(ctx.scheduler.backend, "losses", None)
        return _html(render_job(row, ctx.names().get(row["user_id"], "?"), ctx.store.events(row["id"]),
                                ctx.scheduler.backend.now(), losses(row["id"]) if losses else None,
                                csrf_token(tok), u.name if where == "cookie" else None,
                                files=_job_files(ctx, row["id"]), measured=_measured(ctx, row["id"])))


def _measured(ctx: Any, job_id: str) -> tuple[bool, dict | None]:
    """(whether the backend measures jobs, the job's measured-vs-predicted summary or None)."""
    measured = getattr(ctx.scheduler.backend, "measured", None)
    return (False, None) if measured is None else (True, measured(job_id))


def _job_files(ctx: Any, job_id: str) -> tuple[list, dict[str, str]] | None:
    """(artifacts, log tails) of the job for its page; None where the backend keeps none."""
    from gpuwise.runtime.artifacts import list_artifacts, log_tails
    from gpuwise.service.artifact_routes import job_folder

    folder = job_folder(ctx, job_id)
    if folder is None:
        return None
    listed = list_artifacts(folder)
    return listed, log_tails(folder, artifacts=listed)


def _cancel_route(app: FastAPI, ctx: Any) -> None:
    @app.post("/jobs/{job_id}/cancel", tags=["dashboard"])
    async def cancel_button(job_id: str, request: Request) -> Response:
        import httpx

        found = await _form_user(ctx, request)
        if isinstance(found, Response):
            return found
        transport = httpx.ASGITransport(app=request.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dashboard") as api:
            r = await api.delete(f"/v1/jobs/{quote(job_id, safe='')}",
                                 headers={"Authorization": f"Bearer {request.cookies[COOKIE]}"})
        if r.status_code == 200:
            return _redirect(f"/jobs/{r.json()['id']}")
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        detail = body.get("detail", r.text)
        return _html(dash.error_page(r.status_code, str(detail), back="/"), r.status_code)


def _id_route(app: FastAPI, ctx: Any) -> None:
    @app.get("/v1/job-ids", tags=["jobs"])
    def job_ids(request: Request, prefix: str = Query(..., description="the start of a job id, as the "
                                                      "dashboard shows it (8 characters)")) -> dict[str, Any]:
        """Your job ids that start with ``prefix`` (at most 10): how the CLI resolves a short id."""
        u = ctx.user(request.headers.get("authorization"))
        return {"prefix": prefix, "ids": matching_ids(ctx.store, prefix, None if u.admin else u.id)}


def matching_ids(store: Any, prefix: str, user_id: int | None, limit: int = 10) -> list[str]:
    """Job ids (of ``user_id``; None: everyone's) starting with ``prefix``: a range scan of the id index."""
    from sqlalchemy import select

    from gpuwise.jobqueue import schema as s
    from gpuwise.service.client import is_id_prefix

    p = prefix.strip().lower()
    if not is_id_prefix(p):
        raise InputError("prefix", prefix, "give the start of a job id: 1 to 32 hex digits, e.g. 3f9a01bc")
    q = select(s.jobs.c.id).where(s.jobs.c.id >= p, s.jobs.c.id < p + "g")   # ids are lowercase hex
    if user_id is not None:
        q = q.where(s.jobs.c.user_id == user_id)
    with store.read() as conn:
        return [r[0] for r in conn.execute(q.order_by(s.jobs.c.id).limit(limit))]
