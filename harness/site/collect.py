"""What the site shows, read from a results store: its series, their latest verdicts, change points,
stack changes, the fleets and the upgrades. Plain data; plots.py draws it and pages.py writes it.

A *series* is one board's runs of one experiment (case, steps, precision, backend), across stack
changes: a stack upgrade is a marked point in it, not a new series. The latest run of a series is
judged as the benchmark gate judged it when it was written (judge_run against the store as it was
before that run, as judge_stored judges it: the runs written before it and the baselines saved on
them, held in memory: before.py, judged_as_written).
"""
from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TypeVar

from ..report.sitelinks import series_page
from ..results.constants import GROUP_RUNS, LOOKBACK
from ..results.fleet import board_verdicts, fleet_groups
from ..results.records import Run, RunKey
from ..results.store import ResultsStore
from ..results.verdict import Outcome
from ..results.verdict.changes import change_points
from ..results.verdict.figures import figures, parse_threshold
from ..results.verdict.judging import judge_run
from ..results.verdict.verdict import NOT_COMPARABLE, Verdict
from .before import Written

__all__ = ["Site", "Series", "Upgrade", "Fleet", "JudgedBand", "collect", "judged_as_written", "stack_of",
           "stack_label", "STATUS_ORDER"]

T = TypeVar("T")

# The latest verdict of a series (or of one of its figures), in the order the index lists them.
REGRESSION, PROBATION, NOT_COMP, INVALID, PASS, NO_VERDICT = (
    "regression", "upgrade under probation", "not comparable", "INVALID", "pass", "no verdict yet")
STATUS_ORDER = (REGRESSION, PROBATION, NOT_COMP, INVALID, NO_VERDICT, PASS)
def stack_label(key: RunKey) -> str:
    """'manifest 3f2a..., npu_driver 0.9.6, runtime_lib 2.5.0, ...': a stack in words."""
    return ", ".join([f"manifest {key.manifest_hash[:12]}", *(f"{k} {v}" for k, v in sorted(key.versions.items()))])


def stack_of(key: RunKey) -> str:
    """A stack's id (manifest hash and NPU stack versions): the same for every case run on it."""
    text = json.dumps({"manifest_hash": key.manifest_hash, "versions": key.versions}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class ChangePoint:
    figure: str
    index: int                      # into the series' runs (valid and INVALID)
    before: Run                     # the last valid run before the new level
    after: Run                      # the first valid run of it
    level_before: float
    level_after: float

    @property
    def shift_pct(self) -> float:
        return 100.0 * (self.level_after / self.level_before - 1.0)


@dataclass
class StackChange:
    index: int                      # into the series' runs: the first run of the new stack
    old: RunKey
    new: RunKey

    @property
    def label(self) -> str:
        return "; ".join(self.new.differences(self.old))

    @property
    def upgrade_id(self) -> str:
        return f"{stack_of(self.old)}-{stack_of(self.new)}"


@dataclass
class Series:
    board_model: str
    board: str
    case: str
    experiment: str
    runs: list[Run]                                  # valid and INVALID, oldest first
    baselines: dict[int, str]                        # index into runs -> the baseline's reason
    judgement: Verdict | None = None               # the latest run's, as the gate judged it
    figures: dict[str, list[float | None]] = field(default_factory=dict)      # label -> value per run
    change_points: list[ChangePoint] = field(default_factory=list)
    stack_changes: list[StackChange] = field(default_factory=list)

    @property
    def key(self) -> RunKey:
        return self.runs[-1].key

    @property
    def page(self) -> str:
        k = self.key
        return series_page(self.board, self.case, k.backend, k.precision, k.steps)

    @property
    def stem(self) -> str:
        """The page's file name without its folder and suffix: the stem of its plots' names too."""
        return self.page.removeprefix("series/").removesuffix(".html")

    @property
    def title(self) -> str:
        k = self.key
        return f"{self.case} on {self.board} ({k.backend}, {k.precision}, {k.steps} steps)"

    @property
    def latest(self) -> Run:
        return self.runs[-1]

    def status(self, figure: str | None = None) -> str:
        """The latest verdict of the series, or of one figure of it (STATUS_ORDER's words)."""
        if not self.latest.valid:
            return INVALID
        j = self.judgement
        if j is None or (j.kind not in (NOT_COMPARABLE,) and not j.verdicts):
            return NO_VERDICT
        if j.kind == NOT_COMPARABLE:
            return NOT_COMP
        mine = [v for v in j.verdicts if figure is None or v.label == figure]
        if any(v.regression for v in mine):
            return REGRESSION
        if j.probation is not None:
            return PROBATION
        return PASS if mine else NO_VERDICT

    def verdict(self, figure: str):
        j = self.judgement
        return next((v for v in j.verdicts if v.label == figure), None) if j else None

    def judged_band(self, figure: str) -> JudgedBand | None:
        """The interval the latest run's verdict on `figure` judged, placed over the runs it judged
        together (the latest valid runs, as many as the verdict counts), or None without a verdict.
        The judged figure is their geometric mean (a verdict's shift is of the mean of the logs), and
        the interval is the threshold either side of the reference's centre the shift was taken from."""
        verdict = self.verdict(figure)
        if verdict is None or not self.latest.valid:
            return None
        kept = [(i, v) for i, (run, v) in enumerate(zip(self.runs, self.figures.get(figure, []))) if run.valid and v]
        judged = kept[-max(1, verdict.runs):]
        if not judged or judged[-1][0] != len(self.runs) - 1:
            return None
        level = math.exp(sum(math.log(v) for _, v in judged) / len(judged))
        centre = level / (1.0 + verdict.shift_pct / 100.0)
        widest = 1.0 + verdict.threshold_pct / 100.0
        return JudgedBand(judged[0][0], judged[-1][0], centre / widest, centre * widest, level, verdict.regression,
                          verdict.runs)


@dataclass(frozen=True)
class JudgedBand:
    """The interval a verdict judged a figure by, over the runs it judged (Series.judged_band)."""
    first: int                      # index into the series' runs of the first run judged
    last: int                       # of the last: the series' latest
    low: float
    high: float
    level: float                    # the figure judged: the runs' geometric mean
    regression: bool
    runs: int


@dataclass
class Upgrade:
    """One stack change (old stack -> new) and, per series that went through it, the judgement of the
    new stack's run at its group's last look (GROUP_RUNS, or its latest run before that)."""
    upgrade_id: str
    old: RunKey
    new: RunKey
    members: list[tuple[Series, Run, Verdict, list[Run], list[Run]]] = field(default_factory=list)
    # (series, the run judged, its judgement, the accepted stack's runs it used, the new stack's runs it used)

    @property
    def label(self) -> str:
        return "; ".join(self.new.differences(self.old)) or "same stack"


@dataclass
class Fleet:
    board_model: str
    groups: list                    # (fleet.FleetGroup, [BoardVerdict], [left-out lines])

    @property
    def outliers(self) -> list[str]:
        return sorted({v.board for _, verdicts, _ in self.groups for v in verdicts if v.outlier})

    @property
    def inconclusive(self) -> list[str]:
        """The boards the fleet could not judge: INCONCLUSIVE, or not compared at all (too few alike)."""
        judged = {v.board for _, verdicts, _ in self.groups for v in verdicts if v.outcome is Outcome.INCONCLUSIVE}
        missing = {b for group, verdicts, _ in self.groups for b in group.runs} - \
            {v.board for _, verdicts, _ in self.groups for v in verdicts}
        return sorted(judged | missing)


@dataclass
class Site:
    where: str
    series: list[Series]
    upgrades: list[Upgrade]
    fleets: list[Fleet]
    runs: int

    @property
    def fleet_models(self) -> set[str]:
        """The board models with a fleet page: a series links its fleet only when it was written."""
        return {f.board_model for f in self.fleets}


def collect(store: ResultsStore, threshold: str = "10%") -> Site:
    """Everything the site shows, from one store."""
    threshold_pct = parse_threshold(threshold, "--threshold")
    runs = store.runs(whole=False)
    saved = {(run_id, case): reason for _, run_id, case, reason in store.baseline_pairs()}
    by_series: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        by_series[(run.board_id, run.key.experiment)].append(run)
    series = [_series(members, saved) for members in by_series.values()]
    wanted = [s.latest for s in series] + [m[2] for m in _upgrade_runs(series)]
    judged = _analyse_all(series, lambda: judged_as_written(store, runs, wanted, threshold_pct))
    for s in series:
        s.judgement = judged[id(s.latest)]
    upgrades = _upgrades(series, judged)
    fleets = _fleets(runs)
    series.sort(key=lambda s: (s.board_model, s.board, s.case, s.page))
    return Site(store.where, series, upgrades, fleets, len(runs))


def _series(members: list[Run], saved: dict) -> Series:
    """A series with its figures and stack changes; its intervals and change points come from _analyse."""
    first = members[-1]
    s = Series(first.board_model, first.board_id, first.key.case, first.key.experiment, members,
               {i: saved[(r.run_id, r.key.case)] for i, r in enumerate(members) if (r.run_id, r.key.case) in saved})
    values = [figures(r) for r in members]
    labels = list(dict.fromkeys(label for v in values for label in v))
    s.figures = {label: [v.get(label) for v in values] for label in labels}
    s.stack_changes = [StackChange(i, members[i - 1].key, r.key) for i, r in enumerate(members)
                       if i and r.key.digest != members[i - 1].key.digest]
    return s


def _analyse_all(series: list[Series], meanwhile: Callable[[], T]) -> T:
    """Each series' change points, the series spread over the CPUs while this process does `meanwhile`
    (the judging): they are independent, and a lab's store has tens of them of hundreds of runs
    (tools/bench_site.py). `meanwhile`'s result."""
    payloads = [(s.figures, [r.valid for r in s.runs]) for s in series]
    workers = min(os.cpu_count() or 1, len(series))
    if workers > 1:
        # what change_points imports, imported once before the workers fork rather than by each (~1 s of CPU)
        import ruptures  # noqa: F401
        from scipy import stats  # noqa: F401
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            pending = pool.map(_analyse, payloads)
            done = meanwhile()
            results = list(pending)
    else:
        done = meanwhile()
        results = [_analyse(p) for p in payloads]
    for s, points in zip(series, results):
        s.change_points = [ChangePoint(label, after, s.runs[before], s.runs[after], low, high)
                           for label, before, after, low, high in points]
    return done


def _analyse(payload) -> list:
    """[(label, index of the last valid run before, index of the first of the new level, level before,
    level after)] of one series' figures."""
    figures_, valid = payload
    return [cp for label, values in figures_.items() for cp in _change_points(values, valid, label)]


def _change_points(values: list, valid: list[bool], label: str) -> list[tuple]:
    """verdicts.change_points over the figure's valid runs, placed back among all the series' runs."""
    kept = [(i, v) for i, (ok, v) in enumerate(zip(valid, values)) if ok and v]
    found = change_points([v for _, v in kept]) if len(kept) >= 6 else []
    out, bounds = [], [0, *found, len(kept)]
    for n, cut in enumerate(found):
        before = [v for _, v in kept[bounds[n]:cut]]
        after = [v for _, v in kept[cut:bounds[n + 2]]]
        out.append((label, kept[cut - 1][0], kept[cut][0], sum(before) / len(before), sum(after) / len(after)))
    return out


def judged_as_written(store: ResultsStore, runs: list[Run], wanted: list[Run],
                       threshold_pct: float) -> dict[int, Verdict]:
    """id(run) -> judge_run of each of the `wanted` stored runs against the store as it was before the
    run was written (ResultsStore.as_before, what judge_stored judges it against): the runs written
    before it and the baselines saved on those, read once for the whole site (`runs`, without their
    subgraphs) and held in memory (before.py), so a judgement reads no row of the store. The verdict's
    reference run is the stored run, whole, as judge_stored gives it.

    Taking the store as_before each judged run instead (deleting the later runs in a transaction
    rolled back afterwards) would make the site, a reader, take the write lock of a lab's SQLite file
    (every gate's write waiting) or row locks on a fleet's server; replaying the runs into a
    throw-away store took a lab's 10,000 runs 14 s to write and the 80 judgements' queries 20 s more."""
    written = Written(runs, store.written_order(), store.baseline_pairs())
    judged = {id(run): judge_run(written.before(run), run, threshold_pct)  # type: ignore[arg-type]
              for run in wanted}
    whole = {ident: store.runs(run_id=ident[0], case=ident[1])[0] for ident in
             {_ident(j.reference_run) for j in judged.values() if j.reference_run is not None}}
    return {at: replace(j, reference_run=whole[_ident(j.reference_run)]) if j.reference_run is not None else j
            for at, j in judged.items()}


def _ident(run: Run) -> tuple[str, str]:
    return run.run_id, run.key.case


def _upgrade_runs(series: list[Series]) -> list[tuple[Series, StackChange, Run]]:
    """(series, stack change, the new stack's run judged for it: its group's last look, GROUP_RUNS, or
    its latest valid run before that) of every stack change with a valid run of the new stack."""
    found = []
    for s in series:
        for change in s.stack_changes:
            new = [r for r in s.runs[change.index:] if r.key.digest == change.new.digest and r.valid]
            if new:
                found.append((s, change, new[min(GROUP_RUNS, len(new)) - 1]))
    return found


def _upgrades(series: list[Series], judged: dict[int, Verdict]) -> list[Upgrade]:
    found: dict[str, Upgrade] = {}
    for s, change, run in _upgrade_runs(series):
        judgement = judged[id(run)]
        upto = s.runs.index(run)
        reference = judgement.reference_run.key.digest if judgement.reference_run else change.old.digest
        old_runs = [r for r in s.runs[:upto] if r.valid and r.key.digest == reference][-LOOKBACK:]
        new_runs = [r for r in s.runs[:upto + 1] if r.valid and r.key.digest == change.new.digest][-GROUP_RUNS:]
        upgrade = found.setdefault(change.upgrade_id, Upgrade(change.upgrade_id, change.old, change.new))
        upgrade.members.append((s, run, judgement, old_runs, new_runs))
    return sorted(found.values(), key=lambda u: min(m[1].time for m in u.members))


def _fleets(runs: list[Run]) -> list[Fleet]:
    by_model: dict[str, list] = defaultdict(list)
    for group in fleet_groups(runs):
        verdicts, left_out = board_verdicts(group)
        by_model[group.board_model].append((group, verdicts, left_out))
    # the newest stack first: what the boards run today
    return [Fleet(model, sorted(groups, key=lambda g: max(r.time for rs in g[0].runs.values() for r in rs),
                                reverse=True)) for model, groups in sorted(by_model.items())]
