"""An interleaved A/B session as the results store keeps it: each side one run, the pairs and the verdicts.

A session (harness/results/ab.py) times side A and side B alternately, round by round. The
store keeps each side as one Run keyed by that side's own partition (manifest hash, precision) and NPU
stack, its figures the mean over the session's rounds: one run per side and session, because the rounds
of one session share its conditions and are not independent runs of the stack. A history of the key,
`results check` and an upgrade comparison read these runs like any other. Beside them the store keeps
what the paired verdict was computed from (every round's figures, side by side) and the verdict of each
figure with its effect size and interval, all written in one transaction (ResultsStore.add_ab_session).
The store's columns and values keep the sides' old names (`baseline_run`, `candidate_partition`, side
'baseline' / 'candidate': ab.A and ab.B), so that stores written before read as they did.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..lifecycle.steptimes import STAGE_NAMES
from ..partition.manifest import manifest_sha256, partition_precision
from .ab import A, B
from .records import ResultsError, Run, RunKey, SubgraphTime, board_model_of, utc_now
from .verdict.decision import Decision

__all__ = ["ABRecord", "SIDES", "Filing", "subgraph_times", "side_run", "ab_record", "verdict_of"]

SIDES = (A, B)


@dataclass(frozen=True)
class ABRecord:
    """One stored session: both sides' runs and partitions, the pairs, the verdicts and how it ran."""
    session_id: str
    a: Run
    b: Run
    a_partition: str
    b_partition: str
    pairs: tuple                    # per round: {A: {figure: s}, B: {figure: s}}
    verdicts: tuple                 # Decision per figure
    threshold_pct: float
    confidence: float
    lifecycle: str
    warmup: int
    a_options: dict = field(default_factory=dict)
    b_options: dict = field(default_factory=dict)

    def __post_init__(self):
        where = f"A/B session {self.session_id!r}"
        if self.a.key.case != self.b.key.case or self.a.board_id != self.b.board_id:
            raise ResultsError(f"{where}: both sides must be one case on one board")
        if len(self.pairs) < 2 or any(set(p) != set(SIDES) for p in self.pairs):
            raise ResultsError(f"{where}: needs at least 2 rounds, each with an A and a B")

    @property
    def case(self) -> str:
        return self.a.key.case

    @property
    def regression(self) -> bool:
        return any(v.regression for v in self.verdicts)

    def side(self, name: str) -> Run:
        return self.a if name == A else self.b


def subgraph_times(reports: list[dict]) -> tuple:
    """Core (run-stage) seconds per computed step of every subgraph, over the runs' lifecycle records
    (one row per subgraph, not one per invocation)."""
    total: dict[tuple, float] = {}
    computed = sum(max(r["steps"]["computed"], 1) for r in reports)
    for report in reports:
        for rec in report["lifecycle_records"]:
            if rec["stage"] == "run":
                key = (rec["subgraph"], rec["block"], rec["branch"])
                total[key] = total.get(key, 0.0) + rec["seconds"]
    return tuple(SubgraphTime(str(s), b, br, t / computed) for (s, b, br), t in total.items())


def _mean(values) -> float:
    return float(np.mean(values))


@dataclass(frozen=True)
class Filing:
    """What both sides' runs of one session share: its id and time, case, board and conditions."""
    session_id: str
    time: str
    case: str
    identity: dict
    board: str
    telemetry: dict                 # the session's TelemetryWindow verdict
    provenance: dict                # git revision, CI URL


def side_run(side, reports: list[dict], filing: Filing) -> Run:
    """One side (an ab.Side) of a session as one run: each figure the mean over the session's rounds of
    that side; its run id is the session's and the side's stored key, `<session>-baseline` for A."""
    from .provenance import comparable_versions
    from .telemetry import serial_hash
    tables = [r["tables"] for r in reports]
    steps = len(reports[0]["step_seconds"])
    peaks = [(r.get("memory") or {}).get("run_peak_pss_added_bytes") for r in reports]
    identity, board = filing.identity, filing.board
    return Run(
        run_id=f"{filing.session_id}-{side.name}", time=filing.time, board_id=board,
        board_model=board_model_of(board), model=reports[0]["model"],
        key=RunKey(case=filing.case, steps=steps, precision=partition_precision(side.partition), backend=side.backend,
                   manifest_hash=manifest_sha256(side.partition), versions=comparable_versions(identity)),
        valid=filing.telemetry["valid"], invalid_reasons=tuple(filing.telemetry["reasons"]),
        mean_step_s=_mean([r["denoise_seconds"] / steps for r in reports]),
        total_denoise_s=_mean([r["denoise_seconds"] for r in reports]),
        stages={s: _mean([t["lifecycle_pass"][s] for t in tables]) for s in STAGE_NAMES},
        branches={b: _mean([t["core_per_step"][b] for t in tables]) for b in tables[0]["core_per_step"]},
        step_s=tuple(_mean(column) for column in zip(*(r["step_seconds"] for r in reports))),
        subgraphs=subgraph_times(reports), kernel=identity.get("kernel"), serial_hash=serial_hash(identity),
        device_model=identity.get("model"),
        peak_pss_added_bytes=max((p for p in peaks if p is not None), default=None), **filing.provenance)


def ab_record(session, *, case: str, identity: dict, board: str, telemetry: dict) -> ABRecord:
    """The store's record of a finished `session` (harness.results.ab.ABSession, with its reports and
    the ABRequest it ran) run by this process: `telemetry` is the session's TelemetryWindow verdict (a
    clock change or thermal trip makes both sides INVALID)."""
    from .provenance import ci_url, git_revision, run_id
    request = session.request
    filing = Filing(f"{run_id()}-ab", utc_now(), case, identity, board, telemetry,
                    {"git_revision": git_revision(), "ci_url": ci_url()})
    a, b = (side_run(side, session.reports[side.name], filing) for side in (request.a, request.b))
    return ABRecord(session_id=filing.session_id, a=a, b=b, a_partition=str(request.a.partition),
                    b_partition=str(request.b.partition), pairs=tuple(session.pairs),
                    verdicts=tuple(session.verdicts), threshold_pct=request.threshold_pct,
                    confidence=request.confidence, lifecycle=request.lifecycle, warmup=request.warmup,
                    a_options=_plain(request.a.options.as_dict()),
                    b_options=_plain(request.b.options.as_dict()))


def _plain(options: dict) -> dict:
    """The options as JSON keeps them (a board-sim slowdown table, a lock folder path)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in options.items()}


def verdict_of(row) -> Decision:
    """A stored verdict row back as a Decision."""
    return Decision(kind=row["kind"], label=row["figure"], shift_pct=row["shift_pct"],
                   ci_pct=(row["ci_low_pct"], row["ci_high_pct"]), threshold_pct=row["threshold_pct"],
                    regression=bool(row["regression"]), n=row["n"], confidence=row["confidence"],
                    statistic=row["statistic"], p_value=row["p_value"])
