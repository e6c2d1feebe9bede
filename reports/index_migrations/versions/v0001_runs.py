"""The runs: one row per test.json under a results folder.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# The figures' columns, as reports.history.FIGURES names them when this revision was written.
_FIGURES = ("receive_rate", "latency_p50_us", "latency_p99_us", "latency_p999_us", "loss_ratio", "duplicate_ratio")


def upgrade() -> None:
    op.create_table(
        "maestro_runs",
        sa.Column("results_root", sa.Text, primary_key=True),
        sa.Column("test_id", sa.String(200), primary_key=True),
        sa.Column("name", sa.Text, index=True),
        sa.Column("phase_of", sa.String(200)),
        sa.Column("finished", sa.Boolean, nullable=False),
        sa.Column("started", sa.String(40)),
        sa.Column("ended", sa.String(40)),
        sa.Column("kind", sa.String(40)),
        sa.Column("outcome", sa.String(20)),
        sa.Column("reason", sa.Text),
        sa.Column("generator_bound", sa.Boolean, nullable=False),
        sa.Column("workload_hash", sa.String(16), nullable=False),
        sa.Column("testbed_hash", sa.String(16), nullable=False),
        sa.Column("sut_kind", sa.String(40), nullable=False),
        sa.Column("sut_version", sa.Text, nullable=False),
        sa.Column("client_libraries", sa.JSON, nullable=False),
        sa.Column("testbed", sa.JSON, nullable=False),
        sa.Column("sent", sa.BigInteger),
        sa.Column("received", sa.BigInteger),
        sa.Column("lost", sa.BigInteger),
        sa.Column("duplicates", sa.BigInteger),
        *(sa.Column(key, sa.Float) for key in _FIGURES),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("record_bytes", sa.BigInteger, nullable=False),
        sa.Column("record_mtime_ns", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("maestro_runs")
