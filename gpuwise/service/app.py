"""The HTTP API (v1, OpenAPI schema at /openapi.json) and the dashboard, on FastAPI.

Routes only parse, authorise and render; admission, scheduling and storage are
`gpuwise.jobqueue` library calls. Errors: bad input -> 422 with the CLI's words
(``{"detail": {"field", "value", "fix", "message"}}``), no or unknown token -> 401, someone
else's job -> 404, over quota -> 403, valid but infeasible -> 409, an idempotency key reused with
another body -> 409. What a client may send is bounded in `gpuwise.service.limits` (413, 408, 503).
No Swagger page: it loads its scripts from a CDN, which an offline server cannot reach.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gpuwise.errors import InputError
from gpuwise.jobqueue.admission import Infeasible, QuotaError, prepare
from gpuwise.jobqueue.scheduler import Scheduler
from gpuwise.jobqueue.store import IdempotencyConflict, Store, User
from gpuwise.service.limits import (DEFAULT_READ_TIMEOUT_S, Heavy, PrivatePages, check_user_paths, echo,
                                    read_body)
from gpuwise.service.payloads import event_json, job_json, parse_body, spec_from_body

JOB_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "description": "a job spec (gpuwise/workload/jobspec.py) "
                                    "or {preset, amount, global_batch, constraints}"}},
    "application/yaml": {"schema": {"type": "string", "description": "a job spec YAML file"}}}}}


def _input_error(exc: InputError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": {"field": exc.field, "value": echo(exc.value),
                                                             "fix": exc.fix, "message": str(exc)}})


class _Ctx:
    """What every route needs: the store, the scheduler, and who is asking."""

    def __init__(self, store: Store, scheduler: Scheduler, read_timeout_s: float,
                 inputs_dir: str | None = None) -> None:
        self.store, self.scheduler, self.read_timeout_s = store, scheduler, read_timeout_s
        self.inputs_dir = inputs_dir     # the only folder whose files a job spec may name (serve --inputs-dir)
        self.heavy = Heavy()

    @asynccontextmanager
    async def spec(self, request: Request):
        """The request's job spec: its body read within the limits (holding no worker meanwhile), then
        parsed off the event loop in one of the heavy slots, held until the block ends."""
        from starlette.concurrency import run_in_threadpool

        raw = await read_body(request, self.read_timeout_s)
        ctype = request.headers.get("content-type")
        async with self.heavy.slot():
            yield await run_in_threadpool(
                lambda: check_user_paths(spec_from_body(parse_body(raw, ctype)), self.inputs_dir))

    def user(self, authorization: str | None) -> User:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise HTTPException(401, "send Authorization: Bearer TOKEN (create one with gpuwise token create USER)",
                                headers={"WWW-Authenticate": "Bearer"})
        u = self.store.user_for_token(token)     # no cache: a revoked token stops at once
        if u is None:
            raise HTTPException(401, "unknown token; create one with gpuwise token create USER",
                                headers={"WWW-Authenticate": "Bearer"})
        return u

    def visible(self, job_id: str, u: User) -> dict:
        row = self.store.job(job_id)
        if row is None or (row["user_id"] != u.id and not u.admin):
            raise HTTPException(404, f"no job {job_id} of user {u.name}")
        return row

    def names(self) -> dict[int, str]:
        return {i: x.name for i, x in self.store.users().items()}


def create_app(store: Store, scheduler: Scheduler, run_scheduler: bool = True,
               read_timeout_s: float = DEFAULT_READ_TIMEOUT_S, inputs_dir: str | None = None) -> FastAPI:
    """The app; its lifespan starts and stops the scheduler loop (``run_scheduler``); a request body
    must arrive within ``read_timeout_s``; job specs may name files inside ``inputs_dir`` only."""
    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        if run_scheduler:
            scheduler.start()
        yield
        scheduler.stop()

    app = FastAPI(title="gpuwise", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Submit training jobs; gpuwise predicts their memory (Frenzy), picks GPU types "
                              "and counts, and schedules them on a shared cluster.")

    @app.exception_handler(InputError)
    async def _bad_input(_req: Request, exc: InputError) -> JSONResponse:
        return _input_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _bad_params(_req: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()) if p not in ("query", "path", "body")) or "request"
        return _input_error(InputError(field, err.get("input"), err.get("msg", "invalid")))

    app.add_middleware(PrivatePages)
    ctx = _Ctx(store, scheduler, read_timeout_s, inputs_dir)
    _job_routes(app, ctx)
    _service_routes(app, ctx)
    from gpuwise.service.web import dashboard_routes

    dashboard_routes(app, ctx)
    from gpuwise.service.artifact_routes import artifact_routes

    artifact_routes(app, ctx)
    return app


def _job_routes(app: FastAPI, ctx: _Ctx) -> None:
    def user(authorization: str | None = Header(None)) -> User:
        return ctx.user(authorization)

    @app.post("/v1/jobs", status_code=201, tags=["jobs"], openapi_extra=JOB_BODY)
    async def submit(request: Request, u: User = Depends(user),
                     idempotency_key: str | None = Header(None)) -> JSONResponse:
        """Submit a job: returns its id and the Frenzy prediction, then queues it."""
        from starlette.concurrency import run_in_threadpool

        try:
            alive, lost = ctx.scheduler.surviving()     # a node lost: admitted against the rest
            async with ctx.spec(request) as spec:       # CPU-bound: in a heavy slot
                job = await run_in_threadpool(prepare, alive, u, spec, idempotency_key=idempotency_key,
                                              check=ctx.scheduler.backend.check, lost=lost)
            res = await run_in_threadpool(job.record, ctx.store, ctx.scheduler.backend.now)   # group commit
        except QuotaError as exc:
            raise HTTPException(403, str(exc)) from None
        except (Infeasible, IdempotencyConflict) as exc:
            raise HTTPException(409, str(exc)) from None
        body = {"id": res.job["id"], "state": res.job["state"], "created": res.created,
                "prediction": res.prediction.to_json()}
        return JSONResponse(status_code=201 if res.created else 200, content=body)

    @app.get("/v1/jobs", tags=["jobs"])
    def list_jobs(u: User = Depends(user), state: str | None = Query(None, description="only this state"),
                  limit: int = Query(500, ge=1, le=100000)) -> dict[str, Any]:
        rows = ctx.store.jobs(None if u.admin else u.id, (state,) if state else None, limit)
        who = ctx.names()
        return {"jobs": [job_json(r, who.get(r["user_id"])) for r in rows]}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    def get_job(job_id: str, u: User = Depends(user)) -> dict[str, Any]:
        from gpuwise.service.job_page import compare

        row = ctx.visible(job_id, u)
        hist = [event_json(e) for e in ctx.store.allocation_history(job_id)]
        out = job_json(row, ctx.names().get(row["user_id"]), hist)
        # predicted vs actual (or projected from the measured speed): what the dashboard's table shows
        c = compare(row, ctx.store.events(row["id"]), ctx.scheduler.backend.now())
        out["compare"] = {k: c[k] for k in ("gpus_pred", "gpus_act", "run_pred", "run_act", "cost_pred",
                                            "cost_act", "projected")}
        measured = getattr(ctx.scheduler.backend, "measured", None)   # per step, on the last chunk (ray backend)
        out["measured"] = measured(row["id"]) if measured is not None else None
        return out

    @app.get("/v1/jobs/{job_id}/events", tags=["jobs"])
    def job_events(job_id: str, u: User = Depends(user)) -> dict[str, Any]:
        ctx.visible(job_id, u)
        return {"id": job_id, "events": [event_json(e) for e in ctx.store.events(job_id)]}

    @app.delete("/v1/jobs/{job_id}", tags=["jobs"])
    def cancel(job_id: str, u: User = Depends(user)) -> dict[str, Any]:
        row = ctx.visible(job_id, u)
        if not ctx.store.cancel(job_id, ctx.scheduler.backend.now()):
            raise HTTPException(409, f"job {job_id} already ended ({ctx.store.job(job_id)['state']})")
        return {"id": job_id, "state": "cancelled", "was": row["state"]}


def _service_routes(app: FastAPI, ctx: _Ctx) -> None:
    def user(authorization: str | None = Header(None)) -> User:
        return ctx.user(authorization)

    @app.get("/v1/health", tags=["service"])
    async def health() -> dict[str, Any]:       # on the event loop: never queued behind the thread pool
        h = ctx.scheduler.health.to_json()     # failing rounds show here (ok false), never only in a log
        return {"ok": h["ok"], "backend": ctx.scheduler.backend.name, "policy": ctx.scheduler.policy.name,
                "scheduler": h, "capacity": ctx.scheduler.capacity()}   # lost nodes: fewer GPUs, named

    @app.get("/v1/cluster", tags=["cluster"])
    def cluster(_u: User = Depends(user)) -> dict[str, Any]:
        return {**ctx.scheduler.snapshot(), "jobs": ctx.store.count_jobs()}

    @app.post("/v1/plan", tags=["plan"], openapi_extra=JOB_BODY)
    async def plan(request: Request, _u: User = Depends(user),
                   objective: str = Query("cost", description="cost | time | knee | deadline"),
                   top: int = Query(10, ge=1, le=100)) -> dict[str, Any]:
        """The planner as a service: ranked rental configurations for one job (as `gpuwise plan --json`)."""
        from starlette.concurrency import run_in_threadpool

        from gpuwise.hardware.catalog import load_catalog
        from gpuwise.plan.job import from_jobspec
        from gpuwise.plan.planner import OBJECTIVES, plan as run_plan, to_json

        if objective not in OBJECTIVES:
            raise InputError("objective", objective, "use one of " + ", ".join(OBJECTIVES))
        async with ctx.spec(request) as spec:
            res = await run_in_threadpool(lambda: run_plan(from_jobspec(spec), load_catalog(), objective, top))
        return to_json(res)
