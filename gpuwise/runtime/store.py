"""The controller's state in SQLite (WAL): jobs, their checkpoints (the manifest) and events.

A checkpoint counts only once its row is here: the worker writes a temporary file and renames it
into place, then the controller records (job, step, progress, path) in one transaction. A restarted
`gpuwise run` with the same state folder reads the last recorded checkpoint of every unfinished job
and resumes it from there; finished jobs stay finished.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

from gpuwise.runtime.lock import owner_only

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY, status TEXT NOT NULL, submitted_s REAL, finish_s REAL,
    restarts INTEGER NOT NULL DEFAULT 0, rescales INTEGER NOT NULL DEFAULT 0,
    faults INTEGER NOT NULL DEFAULT 0, lost_steps INTEGER NOT NULL DEFAULT 0,
    attained_gpu_s REAL NOT NULL DEFAULT 0, model TEXT);
CREATE TABLE IF NOT EXISTS checkpoints (
    job TEXT NOT NULL, step INTEGER NOT NULL, progress REAL NOT NULL, path TEXT NOT NULL, t REAL NOT NULL,
    PRIMARY KEY (job, step));
CREATE TABLE IF NOT EXISTS events (
    job TEXT NOT NULL, t REAL NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS losses (
    job TEXT NOT NULL, step INTEGER NOT NULL, loss REAL NOT NULL, PRIMARY KEY (job, step));
"""


class Store:
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "state.sqlite"
        owner_only(self.path)
        # one user at a time, maybe not the thread that opened it (the service's scheduler thread)
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # -- meta -----------------------------------------------------------------------------------
    def get(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def put(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def reset(self) -> None:
        with self.db:
            for t in ("meta", "jobs", "checkpoints", "events", "losses"):
                self.db.execute(f"DELETE FROM {t}")

    # -- jobs -----------------------------------------------------------------------------------
    def save_job(self, name: str, status: str, submitted_s, finish_s, restarts: int, rescales: int,
                 faults: int, lost_steps: int, attained_gpu_s: float, model: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (name, status, submitted_s, finish_s, restarts, rescales, faults, lost_steps,
                         attained_gpu_s, json.dumps(model)))

    def jobs(self) -> dict[str, dict]:
        cur = self.db.execute("SELECT * FROM jobs")
        cols = [c[0] for c in cur.description]
        out = {}
        for row in cur.fetchall():
            d = dict(zip(cols, row))
            d["model"] = json.loads(d["model"] or "{}")
            out[d["name"]] = d
        return out

    def record_checkpoint(self, job: str, step: int, progress: float, path: str, t: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?)", (job, step, progress, path, t))

    def last_checkpoint(self, job: str) -> tuple[int, float, str] | None:
        return self.db.execute("SELECT step, progress, path FROM checkpoints WHERE job=? ORDER BY step DESC "
                               "LIMIT 1", (job,)).fetchone()

    def record_losses(self, job: str, losses: list[tuple[int, float]]) -> None:
        """Each step's training loss; a step trained again after a fault replaces the lost run's."""
        with self.db:
            self.db.executemany("INSERT OR REPLACE INTO losses VALUES (?,?,?)", [(job, s, v) for s, v in losses])

    def _read(self, sql: str, args: tuple) -> list[tuple]:
        """A query on a connection of its own: the service's page threads read while its scheduler
        thread writes on ``self.db`` (WAL: readers never block the writer)."""
        uri = self.path.resolve().as_uri() + "?mode=ro"      # quoted: a folder named with '#', '?' or '%'
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10.0)) as db:
            return db.execute(sql, args).fetchall()

    def losses(self, job: str) -> list[tuple[int, float]]:
        return self._read("SELECT step, loss FROM losses WHERE job=? ORDER BY step", (job,))

    def peek(self, key: str, default=None):
        """``get`` for another thread than the writer's (see ``_read``)."""
        rows = self._read("SELECT value FROM meta WHERE key=?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def event(self, job: str, t: float, kind: str, detail: dict) -> None:
        self.db.execute("INSERT INTO events VALUES (?,?,?,?)", (job, t, kind, json.dumps(detail)))

    def events(self, job: str) -> list[dict]:
        return [{"t": t, "kind": k, **json.loads(d)} for t, k, d in
                self.db.execute("SELECT t, kind, detail FROM events WHERE job=? ORDER BY rowid", (job,))]
