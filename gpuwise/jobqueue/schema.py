"""Tables of the job store (SQLAlchemy Core). Alembic migrations under `migrations/` create them;
a change here needs a new migration revision."""

from __future__ import annotations

from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table,
                        Text, UniqueConstraint)

metadata = MetaData()

users = Table(
    "users", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("quota_gpus", Integer, nullable=True),           # most GPUs at once (None: no limit)
    Column("created_at", Float, nullable=False),
)

tokens = Table(
    "tokens", metadata,
    Column("id", Integer, primary_key=True),
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("token_sha256", String(64), nullable=False, unique=True),   # never the token itself
    Column("created_at", Float, nullable=False),
)

jobs = Table(
    "jobs", metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),  # submission order (arrival order)
    Column("id", String(32), nullable=False, unique=True),  # public id
    Column("user_id", Integer, ForeignKey("users.id"), nullable=False),
    Column("idempotency_key", String(128), nullable=True),
    Column("name", String(256), nullable=False),
    Column("state", String(16), nullable=False),            # queued scheduled running done cancelled failed
    Column("spec", JSON, nullable=False),                   # the validated job spec
    Column("spec_key", String(64), nullable=False),         # sha256 of the canonical spec
    Column("prediction", JSON, nullable=False),             # Frenzy prediction at submission
    Column("max_gpus", Integer, nullable=False),            # most GPUs the policy may give (quota, constraints)
    Column("request_gpus", Integer, nullable=False),        # GPUs asked of rigid parts of policies
    Column("gpu_type", String(64), nullable=True),          # only this type (single-type constraint)
    Column("submitted_at", Float, nullable=False),          # wall clock (unix s)
    Column("submitted_sim", Float, nullable=True),          # backend clock at submission
    Column("progress", Float, nullable=False, default=0.0),  # fraction done, as last recorded
    Column("allocation", JSON, nullable=True),              # {gpu_type, placement, batch_size} or None
    Column("run_from", Float, nullable=True),               # backend clock when progress resumes
    Column("measured_speed", Float, nullable=True),         # fraction of the job per second (backend clock)
    Column("attained_gpu_s", Float, nullable=False, default=0.0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("started_sim", Float, nullable=True),
    Column("finished_sim", Float, nullable=True),
    Column("message", Text, nullable=True),
    UniqueConstraint("user_id", "idempotency_key", name="uq_jobs_user_idem"),
)
Index("ix_jobs_state", jobs.c.state)
Index("ix_jobs_user", jobs.c.user_id)

events = Table(
    "events", metadata,
    Column("id", Integer, primary_key=True),
    Column("job_id", String(32), ForeignKey("jobs.id"), nullable=False, index=True),
    Column("at", Float, nullable=False),                    # wall clock
    Column("at_sim", Float, nullable=True),                 # backend clock
    Column("kind", String(32), nullable=False),             # submitted allocated released resumed done cancelled ...
    Column("detail", JSON, nullable=True),
)

usage = Table(
    "usage", metadata,                                      # GPUs in use per type at each change
    Column("id", Integer, primary_key=True),
    Column("at_sim", Float, nullable=False),
    Column("gpu_type", String(64), nullable=False),
    Column("used", Integer, nullable=False),
)

meta = Table(
    "meta", metadata,                                       # backend, policy, cluster, clock
    Column("key", String(64), primary_key=True),
    Column("value", JSON, nullable=True),
)
