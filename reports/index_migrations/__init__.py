"""Alembic's migrations of the results index's schema (reports.results_index runs them)."""
