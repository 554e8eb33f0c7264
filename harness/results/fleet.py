"""The fleet comparison (`results boards`): each board against the other boards alike in board model,
CPU count, memory and stack, on one key, over the same time window (docs/fleet.md says why each step).

Boards are compared only with boards alike: one group per board model, key (the stack is in it), CPU
count and memory size (the host_cpus and host_memory_bytes of the board's latest valid run, the memory
as the size it stands for, condition.memory_gib: 7.7 and 7.8 GiB reported are both 8 GiB boards;
boards whose runs do not record one are a group of their own). Each group's header names the groups
the model's other boards on the key formed.

A board's window is the span of its newest LOOKBACK valid runs; its reference is every other board of
its group with at least MIN_HISTORY valid runs inside that span. A board is one unit: the mean of the
logs of its runs in the window. Whether a board's mean could be one more board like the others is the
prediction interval of a new board from the k others' means (k - 1 degrees of freedom), at the
fleet's confidence, Bonferroni over the boards judged, never under the history verdict's floor.

Slow boards must not hide each other: a first pass (`_suspects`) finds the boards far from the median
board by the median absolute deviation of the boards' means, which k off boards cannot move while
they are fewer than half the group. They are left out of every reference; every board is then judged
against the rest, and the boards that judgement names become the set left out, until it holds.

Each board's verdict is an Outcome: REGRESSION when it is slower past its threshold, PASS when it is
within it (or faster past it, named a faster outlier) and its reference could have found a board
DETECT_PCT slower with POWER; INCONCLUSIVE when it could not, or when it has no spread to be judged by.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .condition import memory_gib, memory_label
from .constants import CONFIDENCE, HISTORY_FLOOR_PCT, LOOKBACK, MIN_HISTORY
from .records import Run, RunKey
from .verdict import DETECT_PCT, Outcome, minimum_detectable_pct

__all__ = ["BoardVerdict", "FleetGroup", "fleet_groups", "board_verdicts", "fleet_lines", "SCREEN_Z", "MIN_OTHERS",
           "cpus_label", "host_label"]

# The first pass's cut, in robust standard deviations (1.4826 MADs) from the median board: Iglewicz and
# Hoaglin's 3.5 for the modified z-score. A healthy board past it is only left out of the references
# (its own verdict still decides whether it is named); an off board under it stays in them.
SCREEN_Z = 3.5
_MAD_SD = 1.4826                    # a normal's standard deviation over its median absolute deviation
# The fewest other boards a spread is learned from. From two (one degree of freedom) the t quantile at
# the fleet's Bonferroni level is 190-600 and the spread itself is known only to within 16 times
# either way (95 %): the interval is absurd ([-99.9, 125017.6] %) or, by luck, narrow. From three the
# quantile is 22-45 and the interval's width a real figure its detectable effect can be judged by.
MIN_OTHERS = 3


def cpus_label(cpus: int | None) -> str:
    return "CPU count not recorded" if cpus is None else f"{cpus} CPUs"


def host_label(host: tuple) -> str:
    """'8 CPUs, 16 GiB' of a group's (CPU count, memory in GiB)."""
    cpus, gib = host
    return f"{cpus_label(cpus)}, {memory_label(gib)}"


def _host(run: Run) -> tuple:
    """What a board is grouped by besides its model and key: its CPU count and memory size."""
    return run.host_cpus, memory_gib(run.host_memory_bytes)


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
    detectable_pct: float           # the slowdown its reference finds with verdict.POWER
    detect_pct: float = DETECT_PCT  # the promise it is held to
    named: tuple = ()               # boards left out of its reference (off the fleet)

    @property
    def outlier(self) -> str | None:
        """'slower' or 'faster' when the shift is past the threshold, else None."""
        if self.shift_pct > self.threshold_pct:
            return "slower"
        return "faster" if self.shift_pct < -self.threshold_pct else None

    @property
    def outcome(self) -> Outcome:
        if self.outlier == "slower":
            return Outcome.REGRESSION
        return Outcome.PASS if self.outlier or self.detectable_pct <= self.detect_pct else Outcome.INCONCLUSIVE

    def line(self) -> str:
        low, high = self.ci_pct
        shift = f"{self.shift_pct:+.1f} % [{low:.1f}, {high:.1f}]"
        runs = f"{self.runs} valid run(s)" + (f", {self.invalid} INVALID left out" if self.invalid else "")
        detect = f"it could detect {self.detectable_pct:.1f} %"
        named = f" (outlier{'s' if len(self.named) > 1 else ''} {', '.join(self.named)} left out)" if self.named else ""
        others = f"the other {self.others} boards{named}"
        if self.outlier:
            return (f"OUTLIER board {self.board} {self.outlier} than {others}: {shift}, past the "
                    f"{self.threshold_pct:.1f} % threshold learned from their spread "
                    f"(p {self.p_value:.2g}; {detect}; {runs})")
        if self.outcome is Outcome.INCONCLUSIVE:
            return (f"INCONCLUSIVE board {self.board} {shift} against {others}: {detect}, more than the "
                    f"{self.detect_pct:g} % promised; more boards alike or more runs per board would decide it "
                    f"({runs})")
        return f"board {self.board} {shift} against {others}, within the {self.threshold_pct:.1f} % threshold " \
               f"learned from their spread; {detect} ({runs})"


@dataclass(frozen=True)
class FleetGroup:
    """The runs of the boards alike on one key: per board, its runs oldest first."""

    board_model: str
    key: RunKey                     # the newest run's
    runs: dict                      # board -> its runs (valid and INVALID), oldest first
    host: tuple = (None, None)      # (CPU count, memory in GiB) of its boards' latest valid runs
    apart: tuple = ()               # ((CPU count, memory), boards) of the model's other groups on this key

    def header(self) -> str:
        k = self.key
        times = [r.time for runs in self.runs.values() for r in runs]
        apart = "".join(f"; boards with {host_label(h)} ({', '.join(b)}) are a group of their own"
                        for h, b in self.apart)
        return (f"board model {self.board_model}, {host_label(self.host)}, {k.case} ({k.backend}, {k.precision}, "
                f"{k.steps} steps): {len(self.runs)} boards, runs from {min(times)} to {max(times)}{apart}")


def fleet_groups(runs: list[Run], board_model: str | None = None) -> list[FleetGroup]:
    """The groups of `runs` (oldest first) on keys that valid runs of several boards of one model share,
    split by the boards' CPU counts and memory sizes; a group may hold one board (it says it could not
    be compared)."""
    by_key: dict[tuple, dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if board_model is None or run.board_model == board_model:
            by_key[(run.board_model, run.key.digest)][run.board_id].append(run)
    groups = []
    for (model, _), boards in by_key.items():
        valid = {board: [r for r in rs if r.valid] for board, rs in boards.items()}
        valid = {board: rs for board, rs in valid.items() if rs}
        if len(valid) < 2:
            continue
        by_host: dict[tuple, list[str]] = defaultdict(list)
        for board in sorted(valid):
            by_host[_host(valid[board][-1])].append(board)
        key = max((r for rs in boards.values() for r in rs), key=lambda r: r.time).key
        for host, members in sorted(by_host.items(), key=lambda h: -len(h[1])):
            apart = tuple((h, tuple(m)) for h, m in by_host.items() if h != host)
            groups.append(FleetGroup(model, key, {b: boards[b] for b in members}, host, apart))
    return groups


def board_verdicts(group: FleetGroup, detect_pct: float = DETECT_PCT) -> tuple[list[BoardVerdict], list[str]]:
    """(a verdict per board judged, a line for each board that could not be compared and why: those
    are INCONCLUSIVE). The boards the first pass suspects are left out of every reference, then the
    boards named by the verdicts, until the set left out holds (the module docstring)."""
    windows = {board: _window(group, board) for board in group.runs}
    judged = [board for board, w in windows.items() if isinstance(w, _Window)]
    confidence = 1.0 - (1.0 - CONFIDENCE) / max(len(judged), 1)      # Bonferroni over the boards judged
    left_out = _suspects({b: windows[b].mean for b in judged})       # type: ignore[union-attr]
    verdicts: dict[str, BoardVerdict] = {}
    why: dict[str, str] = {}
    for _ in range(len(judged) + 1):
        verdicts, why = {}, {}
        for board in judged:
            found = _verdict(group, board, windows[board], left_out, confidence, len(judged), detect_pct)  # type: ignore[arg-type]
            if isinstance(found, str):
                why[board] = found
            else:
                verdicts[board] = found
        named = {b for b, v in verdicts.items() if v.outlier}
        if named == left_out:
            break
        left_out = named
    lines = [w for w in windows.values() if isinstance(w, str)] + list(why.values())
    return [verdicts[b] for b in judged if b in verdicts], lines


def fleet_lines(runs: list[Run], board_model: str | None = None,
                detect_pct: float = DETECT_PCT) -> tuple[list[str], list[str], list[str]]:
    """(lines, outlier boards, INCONCLUSIVE boards) of every group of `runs`: what `results boards`
    prints, and what fails it (an outlier, or a board the fleet could not judge). A board left out of a
    group whose other boards were judged (one that stopped running, too few runs in the window) is named
    in the lines but not counted: the group was judged, and a retired board must not fail every check."""
    lines: list[str] = []
    outliers: list[str] = []
    inconclusive: list[str] = []
    for group in fleet_groups(runs, board_model):
        verdicts, could_not = board_verdicts(group, detect_pct)
        lines += [group.header(), *(f"  {v.line()}" for v in verdicts), *(f"  {why}" for why in could_not)]
        outliers += [v.board for v in verdicts if v.outlier]
        judged = {v.board: v for v in verdicts}
        inconclusive += [b for b in group.runs
                         if (b in judged and judged[b].outcome is Outcome.INCONCLUSIVE) or not judged]
    return lines, outliers, inconclusive


def _suspects(means: dict[str, float]) -> set[str]:
    """The boards past SCREEN_Z robust standard deviations from the median board (none with fewer than
    three boards: a median of two is their mean)."""
    if len(means) < 3:
        return set()
    values = np.array(list(means.values()))
    centre = float(np.median(values))
    scale = _MAD_SD * float(np.median(np.abs(values - centre)))
    return {b for b, m in means.items() if abs(m - centre) > SCREEN_Z * scale and m != centre}


@dataclass(frozen=True)
class _Window:
    mean: float                     # the mean log step of the board's newest LOOKBACK valid runs
    start: str
    end: str
    runs: int
    invalid: int                    # the board's INVALID runs inside the span


def _window(group: FleetGroup, board: str) -> _Window | str:
    """The board's window, or why it is not judged."""
    runs = group.runs[board]
    valid = [r for r in runs if r.valid][-LOOKBACK:]
    if len(valid) < MIN_HISTORY:
        return (f"INCONCLUSIVE board {board}: {len(valid)} valid run(s), too few to compare it "
                f"({MIN_HISTORY} needed)")
    start, end = valid[0].time, valid[-1].time
    invalid = sum(1 for r in runs if not r.valid and start <= r.time <= end)
    return _Window(float(np.mean(np.log([r.mean_step_s for r in valid]))), start, end, len(valid), invalid)


def _mean_within(runs: list[Run], start: str, end: str) -> float | None:
    """The mean log step of the valid runs between `start` and `end`, None with fewer than MIN_HISTORY."""
    steps = [r.mean_step_s for r in runs if r.valid and start <= r.time <= end]
    return float(np.mean(np.log(steps))) if len(steps) >= MIN_HISTORY else None


def _verdict(group: FleetGroup, board: str, window: _Window, left_out: set, confidence: float, judged: int,
             detect_pct: float) -> BoardVerdict | str:
    """The board's mean against the means of the other boards but `left_out` inside its window: the
    prediction interval of one more board like them, or why there is none."""
    means = {other: _mean_within(theirs, window.start, window.end) for other, theirs in group.runs.items()
             if other != board and other not in left_out}
    others = np.array([m for m in means.values() if m is not None])
    if others.size < MIN_OTHERS:
        return (f"INCONCLUSIVE board {board} ({host_label(group.host)}): {others.size} other board(s) alike with "
                f"{MIN_HISTORY} valid runs in its window ({window.start} to {window.end}); a spread needs "
                f"{MIN_OTHERS}: it could not be compared")
    from scipy import stats  # ~1 s to import: only a fleet judged pays it
    delta = window.mean - float(others.mean())
    se = float(others.std(ddof=1)) * math.sqrt(1.0 + 1.0 / others.size)
    df = others.size - 1
    level = (1.0 - confidence) / 2                     # each side of the two-sided interval
    half = float(stats.t.ppf(1.0 - level, df)) * se
    p_value = 1.0 if se == 0 and delta == 0 else (0.0 if se == 0 else float(2 * stats.t.sf(abs(delta) / se, df)))
    # a slowdown is found when its estimate passes the threshold: where the floor raises it past the
    # interval, by as much more
    detectable = minimum_detectable_pct(se, level, df)
    floor = math.log1p(HISTORY_FLOOR_PCT / 100)
    if half < floor:
        detectable = _pct(math.log1p(detectable / 100) + floor - half)
    return BoardVerdict(board, window.runs, window.invalid, int(others.size), _pct(delta),
                        (_pct(delta - half), _pct(delta + half)), max(HISTORY_FLOOR_PCT, _pct(half)),
                        min(1.0, p_value * judged), detectable, detect_pct,
                        tuple(sorted(left_out - {board})))


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)
