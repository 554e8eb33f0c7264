"""The results store's tables (SQLAlchemy Core), the same on SQLite and PostgreSQL.

The schema's versions are alembic migrations (harness/results/migrations); a test compares the head
migration with these tables, so the two cannot drift apart. CHECK constraints repeat the checks of
records.Run in the database itself: a row written by another tool is held to the same rules. The upper
bound on seconds also rejects NaN and Infinity on PostgreSQL (where NaN sorts above every number);
SQLite stores NaN as NULL, which NOT NULL rejects.
"""
from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = ["metadata", "runs", "run_stages", "run_branches", "run_steps", "run_subgraphs", "run_quality",
           "baselines", "ab_sessions", "ab_rounds", "ab_verdicts", "MAX_SECONDS"]

MAX_SECONDS = 1e9       # 31 years: larger is a unit mistake, and the bound keeps NaN/Infinity out

metadata = MetaData()


def _seconds(name: str, positive: bool = False) -> tuple[Column, CheckConstraint]:
    low = ">" if positive else ">="
    return (Column(name, Float, nullable=False),
            CheckConstraint(f"{name} {low} 0 AND {name} <= {MAX_SECONDS:.0f}", name=f"ck_{name}_range"))


def _child(name: str, *columns) -> Table:
    """A per-run table: deleted with its run, never without it."""
    return Table(name, metadata,
                 Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
                 *columns)


runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(200), nullable=False),
    Column("case_name", String(200), nullable=False),
    Column("time", String(40), nullable=False),
    Column("board_id", String(200), nullable=False, index=True),
    Column("board_model", String(200), nullable=False, index=True),
    Column("model", String(200), nullable=False),
    Column("backend", String(100), nullable=False),
    Column("precision", String(100), nullable=False),
    Column("steps", Integer, CheckConstraint("steps > 0", name="ck_steps_positive"), nullable=False),
    Column("manifest_hash", String(100), nullable=False),
    Column("versions", Text, nullable=False),                # JSON object: component -> version
    Column("key_digest", String(16), nullable=False, index=True),
    Column("experiment", String(16), nullable=False, index=True),
    Column("valid", Boolean, nullable=False),
    Column("invalid_reasons", Text, nullable=False),         # JSON list
    *_seconds("mean_step_s", positive=True),
    *_seconds("total_denoise_s", positive=True),
    Column("peak_pss_added_bytes", BigInteger, CheckConstraint("peak_pss_added_bytes >= 0", name="ck_peak_pss"),
           nullable=True),
    Column("git_revision", String(100)),
    Column("ci_url", Text),
    Column("kernel", String(200)),
    # the host's condition: nullable, an imported run has none
    Column("host_cpus", Integer, CheckConstraint("host_cpus >= 1", name="ck_host_cpus"), nullable=True),
    # (revision "memory"; none in runs stored before it)
    Column("host_memory_bytes", BigInteger, CheckConstraint("host_memory_bytes >= 1", name="ck_host_memory"),
           nullable=True),
    Column("host_load", Float, CheckConstraint("host_load >= 0 AND host_load <= 1000000", name="ck_host_load"),
           nullable=True),
    Column("host_probe_s", Float, CheckConstraint(f"host_probe_s > 0 AND host_probe_s <= {MAX_SECONDS:.0f}",
                                                  name="ck_host_probe_s"), nullable=True),
    # the board's identity where its device tree has a serial: the serial's hash (never the serial) keys
    # the board, so a board whose model string changes keeps its id, history and baseline; the model
    # string as the run read it says when it changed (ResultsStore.filed, judge.board_change)
    Column("serial_hash", String(16), CheckConstraint("length(serial_hash) = 16", name="ck_serial_hash"),
           nullable=True, index=True),
    Column("device_model", String(200), nullable=True),
    UniqueConstraint("run_id", "case_name", name="uq_run_case"),
)

run_stages = _child("run_stages", Column("stage", String(20), nullable=False), *_seconds("seconds_per_step"),
                    UniqueConstraint("run", "stage", name="uq_stage"))
run_branches = _child("run_branches", Column("branch", String(20), nullable=False), *_seconds("seconds_per_step"),
                      UniqueConstraint("run", "branch", name="uq_branch"))
run_steps = _child("run_steps", Column("step", Integer, nullable=False), *_seconds("seconds", positive=True),
                   UniqueConstraint("run", "step", name="uq_step"))
run_subgraphs = _child("run_subgraphs", Column("subgraph", String(200), nullable=False), Column("block", Integer),
                       Column("branch", String(20), nullable=False), *_seconds("seconds_per_step"),
                       UniqueConstraint("run", "subgraph", name="uq_subgraph"))
run_quality = _child("run_quality", Column("metric", String(100), nullable=False),
                     Column("value", Float,
                            CheckConstraint("value > -1e300 AND value < 1e300", name="ck_quality_finite"),
                            nullable=False),
                     UniqueConstraint("run", "metric", name="uq_metric"))

# The accepted reference of one board for one experiment: a pointer to a valid run. Saved from a
# passing session with --save-baseline, or --accept-upgrade after an upgrade comparison passed.
baselines = Table(
    "baselines", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("board_id", String(200), nullable=False),
    Column("experiment", String(16), nullable=False),
    Column("run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("saved", String(40), nullable=False),
    Column("reason", String(40), nullable=False),
    UniqueConstraint("board_id", "experiment", name="uq_baseline"),
)

# An interleaved A/B session (harness/results/ab.py): each side is one run in `runs` (its figures the
# mean over the session's rounds, keyed by its own partition and stack), the rounds' figures pair by
# pair, and the paired verdict per figure with its effect and interval. Deleting a side's run deletes
# its session.
ab_sessions = Table(
    "ab_sessions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(200), nullable=False),
    Column("case_name", String(200), nullable=False),
    Column("time", String(40), nullable=False),
    Column("board_id", String(200), nullable=False, index=True),
    Column("baseline_run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("candidate_run", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("baseline_partition", Text, nullable=False),
    Column("candidate_partition", Text, nullable=False),
    Column("baseline_options", Text, nullable=False),       # JSON object: the side's backend options
    Column("candidate_options", Text, nullable=False),
    Column("lifecycle", String(100), nullable=False),
    Column("rounds", Integer, CheckConstraint("rounds >= 2", name="ck_ab_rounds"), nullable=False),
    Column("warmup", Integer, CheckConstraint("warmup >= 0", name="ck_ab_warmup"), nullable=False),
    Column("threshold_pct", Float, CheckConstraint("threshold_pct > 0 AND threshold_pct < 1000",
                                                   name="ck_ab_threshold"), nullable=False),
    Column("confidence", Float, CheckConstraint("confidence > 0 AND confidence < 1", name="ck_ab_confidence"),
           nullable=False),
    Column("regression", Boolean, nullable=False),
    UniqueConstraint("session_id", "case_name", name="uq_ab_session_case"),
)


def _session_child(name: str, *columns) -> Table:
    return Table(name, metadata,
                 Column("session", Integer, ForeignKey("ab_sessions.id", ondelete="CASCADE"), nullable=False,
                        index=True),
                 *columns)


ab_rounds = _session_child(
    "ab_rounds", Column("round", Integer, nullable=False), Column("side", String(20), nullable=False),
    Column("figure", String(100), nullable=False), *_seconds("seconds"),
    CheckConstraint("side IN ('baseline', 'candidate')", name="ck_ab_side"),
    UniqueConstraint("session", "round", "side", "figure", name="uq_ab_round"))

_PCT = "> -1e6 AND {0} < 1e6"       # a shift in %: finite (keeps NaN out on PostgreSQL, see above)
ab_verdicts = _session_child(
    "ab_verdicts", Column("place", Integer, nullable=False),      # its position in the session's list
    Column("figure", String(100), nullable=False), Column("kind", String(20), nullable=False),
    *(Column(c, Float, CheckConstraint(f"{c} {_PCT.format(c)}", name=f"ck_ab_{c}"), nullable=False)
      for c in ("shift_pct", "ci_low_pct", "ci_high_pct", "threshold_pct")),
    Column("confidence", Float, nullable=False), Column("regression", Boolean, nullable=False),
    Column("n", Integer, nullable=False),
    # the Decision's t statistic and one-sided p-value (revision "decision"; none in sessions stored before it)
    Column("statistic", Float, nullable=True),
    Column("p_value", Float, CheckConstraint("p_value >= 0 AND p_value <= 1", name="ck_ab_p_value"), nullable=True),
    UniqueConstraint("session", "figure", name="uq_ab_figure"))
