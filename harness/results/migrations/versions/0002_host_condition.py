"""The host's condition per run: CPU count, load average per CPU, calibration probe seconds (all
nullable: runs stored before this revision have none, and are judged without a comparability check).

Revision ID: 0002
Revises: 0001
"""
import sqlalchemy as sa
from alembic import op

__all__ = ["upgrade", "downgrade"]

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_MAX = "1000000000"     # tables.MAX_SECONDS as it was at this revision
_COLUMNS = (
    ("host_cpus", sa.Integer, "host_cpus >= 1"),
    ("host_load", sa.Float, "host_load >= 0 AND host_load <= 1000000"),
    ("host_probe_s", sa.Float, f"host_probe_s > 0 AND host_probe_s <= {_MAX}"),
)


def upgrade() -> None:
    # batch mode: SQLite adds a column with a CHECK constraint by copying the table
    with op.batch_alter_table("runs") as batch:
        for name, kind, check in _COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
            batch.create_check_constraint(f"ck_{name}", check)


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        for name, _, _ in _COLUMNS:
            batch.drop_constraint(f"ck_{name}", type_="check")
            batch.drop_column(name)
