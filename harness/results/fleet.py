"""The fleet comparison (`results boards`): each board of a board model against the other boards of
its model, on one key, over the same time window.

A board's window is the span of its newest LOOKBACK valid runs (INVALID runs are left out); its
reference is every other board of its model that ran at least MIN_HISTORY valid runs inside that
span, so a board that stopped running months ago is not the reference of today's boards. A board is
one unit: the mean of the logs of its runs in the window, so a board that runs twice as often does
not weigh twice, and the other boards' means, each weighted equally, are the reference. Whether a
board's mean could be one more board like the others is a prediction from their spread: a
two-sample t-test of the board's one mean against the others' means with a pooled variance
(scipy.stats.ttest_ind, equal_var: the single value brings no variance of its own, so the test is
the prediction interval of a new board from k others, k - 1 degrees of freedom: the board's
externally studentized residual in the fleet). The threshold is learned from that spread: the
half-width of the interval at the fleet's confidence, Bonferroni over the boards judged (a fleet
with nothing wrong names none of them at judge.CONFIDENCE), never under the history verdict's floor
(a statistically clear shift smaller than that is no reason to pull a board). An outlier is a board
past it either way, named "slower" or "faster". A spread needs two other boards.

A board named is left out of the other boards' references, and they are judged again
(board_verdicts). Two boards off together still hide each other: each is in the other's reference
and widens its spread (with six boards, two at +8 % are not named). The board's own history verdict
still sees a board that changed; the fleet comparison finds the board that was always off.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .judge import CONFIDENCE, LOOKBACK
from .records import Run, RunKey
from .verdicts import HISTORY_FLOOR_PCT, MIN_HISTORY

__all__ = ["BoardVerdict", "FleetGroup", "fleet_groups", "board_verdicts"]


@dataclass(frozen=True)
class BoardVerdict:
    """One board's mean step against the other boards' means: shift and interval in % of theirs."""

    board: str
    runs: int                       # its valid runs in its window (its newest LOOKBACK)
    invalid: int                    # its INVALID runs in the window, left out
    others: int                     # boards in its reference
    shift_pct: float
    ci_pct: tuple[float, float]
    threshold_pct: float
    p_value: float                  # two-sided, Bonferroni-adjusted over the boards judged
    named: tuple = ()               # outliers left out of its reference

    @property
    def outlier(self) -> str | None:
        """'slower' or 'faster' when the shift is past the threshold, else None."""
        if self.shift_pct > self.threshold_pct:
            return "slower"
        return "faster" if self.shift_pct < -self.threshold_pct else None

    def line(self) -> str:
        low, high = self.ci_pct
        shift = f"{self.shift_pct:+.1f} % [{low:.1f}, {high:.1f}]"
        runs = f"{self.runs} valid run(s)" + (f", {self.invalid} INVALID left out" if self.invalid else "")
        threshold = f"the {self.threshold_pct:.1f} % threshold learned from their spread"
        named = f" (outlier{'s' if len(self.named) > 1 else ''} {', '.join(self.named)} left out)" if self.named else ""
        others = f"the other {self.others} boards{named}"
        if self.outlier:
            return (f"OUTLIER board {self.board} {self.outlier} than {others}: {shift}, past {threshold} "
                    f"(p {self.p_value:.2g}; {runs})")
        return f"board {self.board} {shift} against {others}, within {threshold} ({runs})"


@dataclass(frozen=True)
class FleetGroup:
    """The runs of one board model on one key: per board, its runs oldest first."""

    board_model: str
    key: RunKey                     # the newest run's
    runs: dict                      # board -> its runs (valid and INVALID), oldest first

    def header(self) -> str:
        k = self.key
        times = [r.time for runs in self.runs.values() for r in runs]
        return (f"board model {self.board_model}, {k.case} ({k.backend}, {k.precision}, {k.steps} steps): "
                f"{len(self.runs)} boards, runs from {min(times)} to {max(times)}")


def fleet_groups(runs: list[Run], board_model: str | None = None) -> list[FleetGroup]:
    """The groups of `runs` (oldest first) with valid runs of several boards of one model on one key."""
    by_key: dict[tuple, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if board_model is None or run.board_model == board_model:
            by_key[(run.board_model, run.key.digest)][run.board_id].append(run)
    return [FleetGroup(model, max((r for rs in boards.values() for r in rs), key=lambda r: r.time).key,
                       dict(sorted(boards.items())))
            for (model, _), boards in by_key.items()
            if sum(any(r.valid for r in rs) for rs in boards.values()) >= 2]


def board_verdicts(group: FleetGroup) -> tuple[list[BoardVerdict], list[str]]:
    """(a verdict per board judged, a line for each board left out and why).

    Boards named an outlier are then left out of the other boards' references and those are judged
    again, until no more is named: an outlier in a board's reference widens its spread and would
    hide a second one (a step-down, as the generalized ESD test does). Every pass is at the first
    pass's Bonferroni level, so a fleet with nothing wrong still names none at judge.CONFIDENCE."""
    windows = {board: _window(group, board, set()) for board in group.runs}
    judged = [board for board, w in windows.items() if isinstance(w, _Window)]
    confidence = 1.0 - (1.0 - CONFIDENCE) / max(len(judged), 1)      # Bonferroni over the boards judged
    verdicts: dict[str, BoardVerdict] = {}
    named: set[str] = set()
    while True:
        again = {board: _window(group, board, named) for board in judged if board not in named}
        found = {board: _verdict(board, w, confidence, len(judged), sorted(named))
                 for board, w in again.items() if isinstance(w, _Window)}
        verdicts.update(found)
        newly = {board for board, v in found.items() if v.outlier}
        if not newly:
            return [verdicts[b] for b in judged], [w for w in windows.values() if isinstance(w, str)]
        named |= newly


@dataclass(frozen=True)
class _Window:
    mean: float                     # the mean log step of the board's newest LOOKBACK valid runs
    others: dict                    # other board -> its mean log step inside their span
    runs: int
    invalid: int                    # the board's INVALID runs inside the span


def _window(group: FleetGroup, board: str, named: set) -> _Window | str:
    """The board's window and its reference (the other boards but the `named` outliers), or why it is
    not judged."""
    runs = group.runs[board]
    valid = [r for r in runs if r.valid][-LOOKBACK:]
    if len(valid) < MIN_HISTORY:
        return f"board {board}: {len(valid)} valid run(s), too few to judge it ({MIN_HISTORY} needed)"
    start, end = valid[0].time, valid[-1].time
    others = {other: _mean_within(theirs, start, end) for other, theirs in group.runs.items()
              if other != board and other not in named}
    others = {other: mean for other, mean in others.items() if mean is not None}
    if len(others) < 2:
        return (f"board {board}: {len(others)} other board(s) with {MIN_HISTORY} valid runs in its window "
                f"({start} to {end}); a spread needs two")
    invalid = sum(1 for r in runs if not r.valid and start <= r.time <= end)
    return _Window(float(np.mean(np.log([r.mean_step_s for r in valid]))), others, len(valid), invalid)


def _mean_within(runs: list[Run], start: str, end: str) -> float | None:
    """The mean log step of the valid runs between `start` and `end`, None with fewer than MIN_HISTORY."""
    steps = [r.mean_step_s for r in runs if r.valid and start <= r.time <= end]
    return float(np.mean(np.log(steps))) if len(steps) >= MIN_HISTORY else None


def _verdict(board: str, window: _Window, confidence: float, judged: int, named: list) -> BoardVerdict:
    """The board's mean against the others' means: a pooled two-sample t-test with its one value on one
    side, i.e. the prediction interval of one more board like the others (the module docstring)."""
    others = np.array(list(window.others.values()))
    delta = window.mean - float(np.mean(others))
    if np.ptp(others) == 0:         # no spread to learn from (identical boards): the floor alone
        half, p_value = 0.0, float(delta == 0)
    else:
        # scipy.stats costs ~1.2 s to import: every `results` command imports this module, few judge a fleet.
        from scipy import stats
        test = stats.ttest_ind([window.mean], others, equal_var=True)
        interval = test.confidence_interval(confidence)
        half, p_value = (float(interval.high) - float(interval.low)) / 2, float(test.pvalue)
    return BoardVerdict(board, window.runs, window.invalid, others.size, _pct(delta),
                        (_pct(delta - half), _pct(delta + half)), max(HISTORY_FLOOR_PCT, _pct(half)),
                        min(1.0, p_value * judged), tuple(named))


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)
