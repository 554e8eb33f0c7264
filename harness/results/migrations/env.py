"""alembic's environment for the results store: always run from harness.results.store on an open
connection (config.attributes["connection"]), never from an alembic.ini of its own."""
from alembic import context

from harness.results.tables import metadata

__all__: list[str] = []

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata,
                  render_as_batch=True)     # SQLite alters a table by copying it: batch mode does that
with context.begin_transaction():
    context.run_migrations()
