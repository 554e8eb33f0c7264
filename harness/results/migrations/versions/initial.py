"""The results store as first shipped: runs with their stage, branch, step, subgraph and quality
figures, the host's condition and the board's serial hash; the boards' baselines; interleaved A/B
sessions with their rounds and verdicts.

The store's first days had three revisions (0001-0003); they are squashed into this one, under a
name of its own, so a store stamped with one of them is an unknown revision rather than one taken
for this schema. The next change of the tables is a revision whose down_revision is "initial".

Revision ID: initial
Revises:
"""
import sqlalchemy as sa
from alembic import op

__all__ = ["upgrade", "downgrade"]

revision = "initial"
down_revision = None
branch_labels = None
depends_on = None

_MAX = "1000000000"     # tables.MAX_SECONDS as it was at this revision
_PCT = "> -1e6 AND {0} < 1e6"
_SIDES = ("baseline", "candidate")


def _seconds(name, positive=False):
    low = ">" if positive else ">="
    return (sa.Column(name, sa.Float, nullable=False),
            sa.CheckConstraint(f"{name} {low} 0 AND {name} <= {_MAX}", name=f"ck_{name}_range"))


def _child(name, *columns, unique):
    op.create_table(name,
                    sa.Column("run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
                    *columns, sa.UniqueConstraint("run", unique, name=f"uq_{unique}"))
    op.create_index(f"ix_{name}_run", name, ["run"])


def _session_child(name, *columns):
    op.create_table(name, sa.Column("session", sa.Integer, sa.ForeignKey("ab_sessions.id", ondelete="CASCADE"),
                                    nullable=False), *columns)
    op.create_index(f"ix_{name}_session", name, ["session"])


def upgrade() -> None:
    _runs()
    _run_children()
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
    _ab_sessions()


def _runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        *(sa.Column(name, sa.String(200), nullable=False) for name in ("run_id", "case_name")),
        sa.Column("time", sa.String(40), nullable=False),
        *(sa.Column(name, sa.String(200), nullable=False) for name in ("board_id", "board_model", "model")),
        *(sa.Column(name, sa.String(100), nullable=False) for name in ("backend", "precision")),
        sa.Column("steps", sa.Integer, sa.CheckConstraint("steps > 0", name="ck_steps_positive"), nullable=False),
        sa.Column("manifest_hash", sa.String(100), nullable=False),
        sa.Column("versions", sa.Text, nullable=False),
        *(sa.Column(name, sa.String(16), nullable=False) for name in ("key_digest", "experiment")),
        sa.Column("valid", sa.Boolean, nullable=False),
        sa.Column("invalid_reasons", sa.Text, nullable=False),
        *_seconds("mean_step_s", positive=True),
        *_seconds("total_denoise_s", positive=True),
        sa.Column("peak_pss_added_bytes", sa.BigInteger,
                  sa.CheckConstraint("peak_pss_added_bytes >= 0", name="ck_peak_pss"), nullable=True),
        sa.Column("git_revision", sa.String(100)),
        sa.Column("ci_url", sa.Text),
        sa.Column("kernel", sa.String(200)),
        sa.Column("host_cpus", sa.Integer, sa.CheckConstraint("host_cpus >= 1", name="ck_host_cpus"), nullable=True),
        sa.Column("host_load", sa.Float, sa.CheckConstraint("host_load >= 0 AND host_load <= 1000000",
                                                            name="ck_host_load"), nullable=True),
        sa.Column("host_probe_s", sa.Float, sa.CheckConstraint(f"host_probe_s > 0 AND host_probe_s <= {_MAX}",
                                                               name="ck_host_probe_s"), nullable=True),
        sa.Column("serial_hash", sa.String(16), sa.CheckConstraint("length(serial_hash) = 16", name="ck_serial_hash"),
                  nullable=True),
        sa.Column("device_model", sa.String(200), nullable=True),
        sa.UniqueConstraint("run_id", "case_name", name="uq_run_case"),
    )
    for column in ("board_id", "board_model", "key_digest", "experiment", "serial_hash"):
        op.create_index(f"ix_runs_{column}", "runs", [column])


def _run_children() -> None:
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


def _ab_sessions() -> None:
    op.create_table(
        "ab_sessions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(200), nullable=False),
        sa.Column("case_name", sa.String(200), nullable=False),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("board_id", sa.String(200), nullable=False),
        *(sa.Column(f"{side}_run", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False)
          for side in _SIDES),
        *(sa.Column(f"{side}_partition", sa.Text, nullable=False) for side in _SIDES),
        *(sa.Column(f"{side}_options", sa.Text, nullable=False) for side in _SIDES),
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
        sa.Column("figure", sa.String(100), nullable=False), *_seconds("seconds"),
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
    for name in ("ab_verdicts", "ab_rounds", "ab_sessions", "baselines", "run_quality", "run_subgraphs", "run_steps",
                 "run_branches", "run_stages", "runs"):
        op.drop_table(name)
