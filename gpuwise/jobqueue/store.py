"""The job store: users and hashed tokens, jobs, their events and allocations, GPU usage, the clock.

Any SQLAlchemy URL works; the default is a SQLite file next to the user's data
(``$GPUWISE_HOME`` or ``~/.gpuwise``/service.db) in WAL mode with synchronous=FULL, so a committed
change survives the process being killed. Writers on SQLite take the write lock at BEGIN
(``BEGIN IMMEDIATE``): a transaction that reads then writes never fails with "database is locked"
half-way, it waits (busy timeout) instead. Readers use a second engine and never block writers.
A new SQLite file is created readable by its owner only (0600; SQLite gives its WAL the same mode).
"""

from __future__ import annotations

import hashlib
import os
import queue
import secrets
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from sqlalchemy.exc import IntegrityError
from sqlalchemy import Engine, create_engine, delete, event, func, insert, select, update

from gpuwise.errors import InputError
from gpuwise.jobqueue import schema as s
from gpuwise.runtime.lock import owner_only

ACTIVE = ("queued", "scheduled", "running")
TERMINAL = ("done", "cancelled", "failed")


def default_url() -> str:
    home = Path(os.environ.get("GPUWISE_HOME") or Path.home() / ".gpuwise")
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'service.db'}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None: another database, or in memory)."""
    if not url.startswith("sqlite:///") or url.removeprefix("sqlite:///") in ("", ":memory:"):
        return None
    return Path(url.removeprefix("sqlite:///").split("?")[0])


class IdempotencyConflict(Exception):
    """An Idempotency-Key reused with a different job spec (HTTP 409 at the edge)."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class User:
    id: int
    name: str
    admin: bool
    quota_gpus: int | None


def _sqlite_engine(url: str, immediate: bool) -> Engine:
    eng = create_engine(url, connect_args={"check_same_thread": False, "timeout": 60},
                        pool_size=8, max_overflow=32)

    @event.listens_for(eng, "connect")
    def _connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None      # we emit BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA busy_timeout=60000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(eng, "begin")
    def _begin(conn) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return eng


def _same_spec(old: dict, fields: dict[str, Any], key: str) -> dict:
    """The recorded job of a repeated key, if it was submitted with the same spec."""
    if old["spec_key"] != fields.get("spec_key"):
        raise IdempotencyConflict(f"Idempotency-Key {key!r} was used for job {old['id']} with another job spec; "
                                  "use a new key for a new job")
    return old


class _Pending:
    """One submission waiting for the writer thread."""

    def __init__(self, args: tuple) -> None:
        self.args, self.done = args, threading.Event()
        self.result: tuple[dict, bool] | None = None
        self.error: BaseException | None = None


class Store:
    """All reads and writes of the service's state (one instance per process)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or default_url()
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()
        try:
            if sqlite_path(self.url) is not None:
                owner_only(sqlite_path(self.url))
            if self.url.startswith("sqlite"):
                self.engine = _sqlite_engine(self.url, immediate=True)
                self.reader = _sqlite_engine(self.url, immediate=False)
            else:
                self.engine = self.reader = create_engine(self.url, pool_pre_ping=True)
        except Exception as exc:  # bad URL syntax, missing driver
            raise InputError("--db", self.url, f"not a usable SQLAlchemy URL ({exc}); e.g. "
                             "sqlite:///path/service.db or postgresql://user@host/db") from None
        self.migrate()

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (idempotent)."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    @contextmanager
    def write(self) -> Iterator[Any]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Any]:
        with self.reader.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()
        if self.reader is not self.engine:
            self.reader.dispose()

    # -- users ------------------------------------------------------------------------------
    def create_token(self, name: str, admin: bool = False, quota_gpus: int | None = None) -> tuple[User, str]:
        """A new token for user ``name`` (created if new; ``admin``/``quota_gpus`` update it)."""
        if not name or len(name) > 128 or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise InputError("USER", name, "use letters, digits, '-', '_' or '.' (at most 128)")
        if quota_gpus is not None and quota_gpus < 1:
            raise InputError("--quota-gpus", quota_gpus, "give at least 1 (or leave it out: no limit)")
        token = "gw_" + secrets.token_urlsafe(32)
        now = time.time()
        with self.write() as conn:
            row = conn.execute(select(s.users).where(s.users.c.name == name)).mappings().first()
            if row is None:
                uid = conn.execute(insert(s.users).values(name=name, admin=admin, quota_gpus=quota_gpus,
                                                          created_at=now)).inserted_primary_key[0]
            else:
                uid = row["id"]
                conn.execute(update(s.users).where(s.users.c.id == uid).values(
                    admin=admin or row["admin"], quota_gpus=quota_gpus if quota_gpus is not None else row["quota_gpus"]))
            conn.execute(insert(s.tokens).values(user_id=uid, token_sha256=hash_token(token), created_at=now))
            u = conn.execute(select(s.users).where(s.users.c.id == uid)).mappings().one()
        return User(u["id"], u["name"], bool(u["admin"]), u["quota_gpus"]), token

    def revoke_tokens(self, name: str) -> int:
        """Delete every token of user ``name``; how many there were."""
        with self.write() as conn:
            uid = conn.execute(select(s.users.c.id).where(s.users.c.name == name)).scalar()
            if uid is None:
                raise InputError("USER", name, "no such user (gpuwise token create USER makes one)")
            return conn.execute(delete(s.tokens).where(s.tokens.c.user_id == uid)).rowcount

    def user_for_token(self, token: str) -> User | None:
        with self.read() as conn:
            u = conn.execute(select(s.users).join(s.tokens, s.tokens.c.user_id == s.users.c.id)
                             .where(s.tokens.c.token_sha256 == hash_token(token))).mappings().first()
        return None if u is None else User(u["id"], u["name"], bool(u["admin"]), u["quota_gpus"])

    def users(self) -> dict[int, User]:
        with self.read() as conn:
            rows = conn.execute(select(s.users)).mappings().all()
        return {u["id"]: User(u["id"], u["name"], bool(u["admin"]), u["quota_gpus"]) for u in rows}

    # -- meta -------------------------------------------------------------------------------
    def meta(self, key: str, default: Any = None) -> Any:
        with self.read() as conn:
            v = conn.execute(select(s.meta.c.value).where(s.meta.c.key == key)).first()
        return default if v is None else v[0]

    def set_meta(self, conn, key: str, value: Any) -> None:
        if conn.execute(update(s.meta).where(s.meta.c.key == key).values(value=value)).rowcount == 0:
            conn.execute(insert(s.meta).values(key=key, value=value))

    # -- jobs -------------------------------------------------------------------------------
    def insert_job(self, user: User, fields: dict[str, Any], idempotency_key: str | None,
                   clock: Callable[[], float] | None = None) -> tuple[dict, bool]:
        """Record a submitted job (state queued) and its first event; with an idempotency key a
        repeated submission returns the recorded job and False instead of a second one.

        Group commit: concurrent submissions are written by one writer thread, many per
        transaction, so they share one fsync; each call returns only after its job is committed.
        ``clock`` (the backend clock) is read in that transaction: the job's arrival time."""
        item = _Pending((user, fields, idempotency_key, clock))
        with self._writer_lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_loop, name="gpuwise-store-writer", daemon=True)
                self._writer.start()
        self._queue.put(item)
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.result

    def _write_loop(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                with self.write() as conn:
                    results = [self._insert(conn, *it.args) for it in batch]
                for it, res in zip(batch, results):
                    it.result = res
            except Exception:          # one bad row must not fail its neighbours: one by one
                for it in batch:
                    try:
                        with self.write() as conn:
                            it.result = self._insert(conn, *it.args)
                    except Exception as exc:  # noqa: BLE001 -- handed to the caller's thread
                        it.error = exc
                        if isinstance(exc, IntegrityError) and it.args[2]:   # a twin in another process won
                            with self.read() as conn:
                                old = self._by_key(conn, it.args[0].id, it.args[2])
                            try:
                                if old is not None:
                                    it.result, it.error = (_same_spec(old, it.args[1], it.args[2]), False), None
                            except IdempotencyConflict as conflict:
                                it.error = conflict
            for it in batch:
                it.done.set()

    def _insert(self, conn, user: User, fields: dict[str, Any], key: str | None,
                clock: Callable[[], float] | None) -> tuple[dict, bool]:
        if key:
            old = self._by_key(conn, user.id, key)
            if old is not None:
                return _same_spec(old, fields, key), False
        job_id, now = uuid.uuid4().hex, time.time()
        sim_now = clock() if clock else None
        conn.execute(insert(s.jobs).values(
            id=job_id, user_id=user.id, idempotency_key=key, state="queued", submitted_at=now,
            submitted_sim=sim_now, progress=0.0, attained_gpu_s=0.0, restarts=0, **fields))
        conn.execute(insert(s.events).values(job_id=job_id, at=now, at_sim=sim_now, kind="submitted",
                                             detail={"user": user.name}))
        return dict(conn.execute(select(s.jobs).where(s.jobs.c.id == job_id)).mappings().one()), True

    def _by_key(self, conn, user_id: int, key: str) -> dict | None:
        row = conn.execute(select(s.jobs).where(s.jobs.c.user_id == user_id,
                                                s.jobs.c.idempotency_key == key)).mappings().first()
        return None if row is None else dict(row)

    def job(self, job_id: str) -> dict | None:
        with self.read() as conn:
            row = conn.execute(select(s.jobs).where(s.jobs.c.id == job_id)).mappings().first()
        return None if row is None else dict(row)

    def jobs(self, user_id: int | None = None, states: tuple[str, ...] | None = None,
             limit: int | None = None, newest_first: bool = True) -> list[dict]:
        q = select(s.jobs)
        if user_id is not None:
            q = q.where(s.jobs.c.user_id == user_id)
        if states:
            q = q.where(s.jobs.c.state.in_(states))
        q = q.order_by(s.jobs.c.seq.desc() if newest_first else s.jobs.c.seq)
        if limit:
            q = q.limit(limit)
        with self.read() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def count_jobs(self) -> dict[str, int]:
        with self.read() as conn:
            rows = conn.execute(select(s.jobs.c.state, func.count()).group_by(s.jobs.c.state)).all()
        return {k: int(v) for k, v in rows}

    def events(self, job_id: str) -> list[dict]:
        with self.read() as conn:
            rows = conn.execute(select(s.events).where(s.events.c.job_id == job_id)
                                .order_by(s.events.c.id)).mappings().all()
        return [dict(r) for r in rows]

    def allocation_history(self, job_id: str) -> list[dict]:
        return [e for e in self.events(job_id) if e["kind"] in ("allocated", "released", "resumed")]

    def cancel(self, job_id: str, sim_now: float | None) -> bool:
        """Mark an active job cancelled and its allocation released (the scheduler frees the GPUs on
        its next round); False if it had ended."""
        with self.write() as conn:
            alloc = conn.execute(select(s.jobs.c.allocation).where(s.jobs.c.id == job_id)).scalar()
            n = conn.execute(update(s.jobs).where(s.jobs.c.id == job_id, s.jobs.c.state.in_(ACTIVE))
                             .values(state="cancelled", finished_sim=sim_now, allocation=None)).rowcount
            if n:
                now = time.time()
                conn.execute(insert(s.events).values(job_id=job_id, at=now, at_sim=sim_now, kind="cancelled",
                                                     detail=None))
                if alloc:
                    conn.execute(insert(s.events).values(job_id=job_id, at=now, at_sim=sim_now, kind="released",
                                                         detail=alloc))
        return bool(n)

    def usage_series(self) -> list[dict]:
        with self.read() as conn:
            return [dict(r) for r in conn.execute(select(s.usage).order_by(s.usage.c.id)).mappings()]
