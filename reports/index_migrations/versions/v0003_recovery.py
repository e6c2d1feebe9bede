"""Each run's recovery after its faults, a figure the gate judges.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("maestro_runs", sa.Column("recovery_s", sa.Float))
    # As for 0002: every row is read again from its test.json at the next sync.
    op.execute(sa.text("UPDATE maestro_runs SET record_mtime_ns = -1"))


def downgrade() -> None:
    with op.batch_alter_table("maestro_runs") as table:
        table.drop_column("recovery_s")
