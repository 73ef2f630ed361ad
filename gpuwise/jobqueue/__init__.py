"""A durable job queue: a SQL store (SQLAlchemy, Alembic migrations), admission with per-user GPU
quotas, and a scheduler loop that drives one policy on a backend (simulated time, or the Ray runtime).

It sits with sim / runtime (it drives them) and below the service, which only parses and renders."""
