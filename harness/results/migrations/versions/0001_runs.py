"""Runs with their stage, branch, step, subgraph and quality figures, and the boards' baselines.

Revision ID: 0001
Revises:
"""
import sqlalchemy as sa
from alembic import op

__all__ = ["upgrade", "downgrade"]

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MAX = "1000000000"     # tables.MAX_SECONDS as it was at this revision


def _seconds(name, positive=False):
    low = ">" if positive else ">="
    return (sa.Column(name, sa.Float, nullable=False),
            sa.CheckConstraint(f"{name} {low} 0 AND {name} <= {_MAX}", name=f"ck_{name}_range"))


def _child(name, *columns, unique):
    op.create_table(name,
                    sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
                    *columns, sa.UniqueConstraint("run", unique, name=f"uq_{unique}"))
    op.create_index(f"ix_{name}_run", name, ["run"])


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        *(sa.Column(name, sa.String(200), nullable=False)
          for name in ("run_id", "case_name")),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("board_id", sa.String(200), nullable=False),
        sa.Column("board_model", sa.String(200), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("backend", sa.String(100), nullable=False),
        sa.Column("precision", sa.String(100), nullable=False),
        sa.Column("steps", sa.Integer, sa.CheckConstraint("steps > 0", name="ck_steps_positive"), nullable=False),
        sa.Column("manifest_hash", sa.String(100), nullable=False),
        sa.Column("versions", sa.Text, nullable=False),
        sa.Column("key_digest", sa.String(16), nullable=False),
        sa.Column("experiment", sa.String(16), nullable=False),
        sa.Column("valid", sa.Boolean, nullable=False),
        sa.Column("invalid_reasons", sa.Text, nullable=False),
        *_seconds("mean_step_s", positive=True),
        *_seconds("total_denoise_s", positive=True),
        sa.Column("peak_pss_added_bytes", sa.BigInteger,
                  sa.CheckConstraint("peak_pss_added_bytes >= 0", name="ck_peak_pss"), nullable=True),
        sa.Column("git_revision", sa.String(100)),
        sa.Column("ci_url", sa.Text),
        sa.Column("kernel", sa.String(200)),
        sa.UniqueConstraint("run_id", "case_name", name="uq_run_case"),
    )
    for column in ("board_id", "board_model", "key_digest", "experiment"):
        op.create_index(f"ix_runs_{column}", "runs", [column])
    _child("run_stages", sa.Column("stage", sa.String(20), nullable=False), *_seconds("seconds_per_step"),
           unique="stage")
    _child("run_branches", sa.Column("branch", sa.String(20), nullable=False), *_seconds("seconds_per_step"),
           unique="branch")
    _child("run_steps", sa.Column("step", sa.Integer, nullable=False), *_seconds("seconds", positive=True),
           unique="step")
    _child("run_subgraphs", sa.Column("subgraph", sa.String(200), nullable=False), sa.Column("block", sa.Integer),
           sa.Column("branch", sa.String(20), nullable=False), *_seconds("seconds_per_step"), unique="subgraph")
    _child("run_quality", sa.Column("metric", sa.String(100), nullable=False),
           sa.Column("value", sa.Float, sa.CheckConstraint("value > -1e300 AND value < 1e300",
                                                           name="ck_quality_finite"), nullable=False),
           unique="metric")
    op.create_table(
        "baselines",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("board_id", sa.String(200), nullable=False),
        sa.Column("experiment", sa.String(16), nullable=False),
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("saved", sa.String(40), nullable=False),
        sa.Column("reason", sa.String(40), nullable=False),
        sa.UniqueConstraint("board_id", "experiment", name="uq_baseline"),
    )


def downgrade() -> None:
    for name in ("baselines", "run_quality", "run_subgraphs", "run_steps", "run_branches", "run_stages", "runs"):
        op.drop_table(name)
