"""A run keeps its host's total memory (records.Run.host_memory_bytes), so the fleet compares a board
only with boards of the same memory size (fleet.py) and a history only with runs on it (verdict's
reference.comparability). Runs stored before it have none: they read as not recorded.

Revision ID: memory
Revises: decision
"""
import sqlalchemy as sa
from alembic import op

__all__ = ["upgrade", "downgrade"]

revision = "memory"
down_revision = "decision"
branch_labels = None
depends_on = None


# Plain ALTER TABLE both ways, never batch mode: on SQLite batch mode copies a table, and dropping the
# old "runs" (foreign keys on, ON DELETE CASCADE) would delete every run's stages, steps and subgraphs
# and every A/B session. SQLite (3.35 and later) adds the column with its CHECK and drops it with it.


def upgrade() -> None:
    op.add_column("runs", sa.Column("host_memory_bytes", sa.BigInteger,
                                    sa.CheckConstraint("host_memory_bytes >= 1", name="ck_host_memory"),
                                    nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "host_memory_bytes")      # its CHECK goes with it (PostgreSQL and SQLite)
