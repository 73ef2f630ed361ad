"""initial schema: users, tokens, jobs, events, usage, meta

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("quota_gpus", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(32), nullable=False, unique=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("spec_key", sa.String(64), nullable=False),
        sa.Column("prediction", sa.JSON, nullable=False),
        sa.Column("max_gpus", sa.Integer, nullable=False),
        sa.Column("request_gpus", sa.Integer, nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=True),
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("submitted_sim", sa.Float, nullable=True),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("allocation", sa.JSON, nullable=True),
        sa.Column("run_from", sa.Float, nullable=True),
        sa.Column("measured_speed", sa.Float, nullable=True),
        sa.Column("attained_gpu_s", sa.Float, nullable=False),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("started_sim", sa.Float, nullable=True),
        sa.Column("finished_sim", sa.Float, nullable=True),
        sa.Column("message", sa.Text, nullable=True),
        sa.UniqueConstraint("user_id", "idempotency_key", name="uq_jobs_user_idem"),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_user", "jobs", ["user_id"])
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String(32), sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("at_sim", sa.Float, nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("detail", sa.JSON, nullable=True),
    )
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_table(
        "usage",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at_sim", sa.Float, nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("used", sa.Integer, nullable=False),
    )
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON, nullable=True),
    )


def downgrade() -> None:
    for name in ("meta", "usage", "events", "jobs", "tokens", "users"):
        op.drop_table(name)
