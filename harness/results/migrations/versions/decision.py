"""An A/B verdict keeps its Decision's statistic and one-sided p-value (verdicts.Decision), so a stored
session is read back as it was judged, not with its p-value inverted from its interval.

Revision ID: decision
Revises: initial
"""
import sqlalchemy as sa
from alembic import op

__all__ = ["upgrade", "downgrade"]

revision = "decision"
down_revision = "initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ab_verdicts") as batch:
        batch.add_column(sa.Column("statistic", sa.Float, nullable=True))
        batch.add_column(sa.Column("p_value", sa.Float, sa.CheckConstraint("p_value >= 0 AND p_value <= 1",
                                                                           name="ck_ab_p_value"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ab_verdicts") as batch:
        batch.drop_constraint("ck_ab_p_value", type_="check")
        batch.drop_column("p_value")
        batch.drop_column("statistic")
