"""Each run's latency distribution (percentile, µs), for the gate's whole-distribution check.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("maestro_runs", sa.Column("latency_distribution", sa.JSON))
    # Every row is read again from its test.json at the next sync, which fills the new column:
    # the files stay the truth, and an index made before it judges no night without it.
    op.execute(sa.text("UPDATE maestro_runs SET record_mtime_ns = -1"))


def downgrade() -> None:
    with op.batch_alter_table("maestro_runs") as table:
        table.drop_column("latency_distribution")
