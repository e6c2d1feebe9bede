"""Alembic's environment for the results index: reports.results_index hands it an open
connection; no alembic.ini, no URL of its own."""

from alembic import context

from reports.results_index import VERSION_TABLE

context.configure(connection=context.config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
