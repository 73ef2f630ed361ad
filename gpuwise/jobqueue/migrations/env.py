"""Alembic environment: the connection comes from `gpuwise.jobqueue.store.migrate` (config attribute)."""

from alembic import context

from gpuwise.jobqueue.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
