"""Why a run's latency is no figure, where a run kept its outcome without one (the gate says so
rather than pass what it did not judge).

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("maestro_runs", sa.Column("latency_untrusted", sa.Text))
    # As for 0002: every row is read again from its test.json at the next sync.
    op.execute(sa.text("UPDATE maestro_runs SET record_mtime_ns = -1"))


def downgrade() -> None:
    with op.batch_alter_table("maestro_runs") as table:
        table.drop_column("latency_untrusted")
