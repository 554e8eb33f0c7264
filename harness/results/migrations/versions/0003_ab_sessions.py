"""Interleaved A/B sessions: each side a run, the rounds' figures and the paired verdicts (additive:
no table of an earlier revision changes).

Revision ID: 0003
Revises: 0002
"""
import sqlalchemy as sa
from alembic import op

__all__ = ["upgrade", "downgrade"]

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_MAX = "1000000000"     # tables.MAX_SECONDS as it was at this revision
_PCT = "> -1e6 AND {0} < 1e6"


def _session_child(name, *columns):
    op.create_table(name, sa.Column("session", sa.Integer, sa.ForeignKey("ab_sessions.id", ondelete="CASCADE"),
                                    nullable=False), *columns)
    op.create_index(f"ix_{name}_session", name, ["session"])


def upgrade() -> None:
    op.create_table(
        "ab_sessions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("case_name", sa.String(200), nullable=False),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("board_id", sa.String(200), nullable=False),
        *(sa.Column(f"{side}_run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False)
          for side in ("baseline", "candidate")),
        *(sa.Column(f"{side}_partition", sa.Text, nullable=False) for side in ("baseline", "candidate")),
        *(sa.Column(f"{side}_options", sa.Text, nullable=False) for side in ("baseline", "candidate")),
        sa.Column("lifecycle", sa.String(100), nullable=False),
        sa.Column("rounds", sa.Integer, sa.CheckConstraint("rounds >= 2", name="ck_ab_rounds"), nullable=False),
        sa.Column("warmup", sa.Integer, sa.CheckConstraint("warmup >= 0", name="ck_ab_warmup"), nullable=False),
        sa.Column("threshold_pct", sa.Float, sa.CheckConstraint("threshold_pct > 0 AND threshold_pct < 1000",
                                                                name="ck_ab_threshold"), nullable=False),
        sa.Column("confidence", sa.Float, sa.CheckConstraint("confidence > 0 AND confidence < 1",
                                                             name="ck_ab_confidence"), nullable=False),
        sa.Column("regression", sa.Boolean, nullable=False),
        sa.UniqueConstraint("session_id", "case_name", name="uq_ab_session_case"),
    )
    op.create_index("ix_ab_sessions_board_id", "ab_sessions", ["board_id"])
    _session_child(
        "ab_rounds", sa.Column("round", sa.Integer, nullable=False), sa.Column("side", sa.String(20), nullable=False),
        sa.Column("figure", sa.String(100), nullable=False), sa.Column("seconds", sa.Float, nullable=False),
        sa.CheckConstraint(f"seconds >= 0 AND seconds <= {_MAX}", name="ck_seconds_range"),
        sa.CheckConstraint("side IN ('baseline', 'candidate')", name="ck_ab_side"),
        sa.UniqueConstraint("session", "round", "side", "figure", name="uq_ab_round"))
    _session_child(
        "ab_verdicts", sa.Column("place", sa.Integer, nullable=False),
        sa.Column("figure", sa.String(100), nullable=False), sa.Column("kind", sa.String(20), nullable=False),
        *(sa.Column(c, sa.Float, sa.CheckConstraint(f"{c} {_PCT.format(c)}", name=f"ck_ab_{c}"), nullable=False)
          for c in ("shift_pct", "ci_low_pct", "ci_high_pct", "threshold_pct")),
        sa.Column("confidence", sa.Float, nullable=False), sa.Column("regression", sa.Boolean, nullable=False),
        sa.Column("n", sa.Integer, nullable=False),
        sa.UniqueConstraint("session", "figure", name="uq_ab_figure"))


def downgrade() -> None:
    for name in ("ab_verdicts", "ab_rounds", "ab_sessions"):
        op.drop_table(name)
