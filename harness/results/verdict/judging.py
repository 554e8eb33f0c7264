"""judge(store, run): what a new run is compared with, and the verdicts (decision.py) on each of its figures.

The reference of a run is its board's *accepted* stack for its experiment, in this order:
  1. the stack of its board's baseline for the experiment (saved with --save-baseline or --accept-upgrade);
  2. else the stack of the board's first valid run of the experiment (its history before any change);
  3. else the fleet's baseline for the board's model (a new or reflashed board), labelled so;
  4. else nothing: the first run of the experiment, "no baseline yet".
When the reference has the run's own key the comparison is a *history* one: the run against the valid
runs of its key on its board. When the keys differ only in the stack (manifest hash, NPU stack versions,
see records.STACK_FIELDS) it is an *upgrade* comparison: the run against the latest valid runs of the
accepted stack. The new stack is under probation until --accept-upgrade (or a saved baseline) makes it
the accepted one: every run of it is an upgrade comparison, its earlier runs its group (as a history's
runs since a change), and the judgement says which run of the new stack it is. Either way each figure
(the step, every branch's core time, every lifecycle stage) gets a history verdict, the threshold
learned from the spread of those runs. With too few of them for a spread, the fixed rule against the
latest of them stands in when the reference is a saved baseline or the run is an upgrade (a stack 3x
slower must never pass for lack of history); when a run of the accepted stack has only runs that
merely happened before, there is no verdict yet, and the judgement says so.

The runs since a change are judged as one group: after a new git revision (history) or a new stack
(upgrade), the run and the earlier runs of the new revision or stack, up to GROUP_RUNS of them, against
the runs before the change. The interval of a group's mean narrows with its size, so a +5 % shift that
one run cannot tell from drift is clear after a few; once a change has had GROUP_RUNS runs its verdict
is given and later runs are judged alone again (a sudden jump within one revision is not diluted).
The GROUP_RUNS looks at one change are one family as well: look k spends a part of the change's
false-alarm rate 1 - CONFIDENCE (one-sided: only a slowdown fails; look_alpha: a large part on the
first, the rest growing with k), so a change with nothing in it is flagged by any of its looks at
most 1 - CONFIDENCE of the time. A run
judged alone keeps the two-sided CONFIDENCE it always had, (1 - CONFIDENCE) / 2 one-sided: at the
whole 1 - CONFIDENCE one-sided, the outlier screen's small excess took it over that on the simulated
board (docs/results-statistics.md).

A regression judged from one run (look 1 of a change, or a run judged alone) fails only when a second
run confirms it (confirm): the benchmark gate then runs the case once more in the same job and judges
that run against the same history (what decides), and as the change's next look with the first run in
its group (shown). One
run disturbed far past its history is what a single run's verdict cannot tell from a regression; a real
one is there in the second run too. A group's verdict has its repetition already.

The figures of one look are one family sharing its false-alarm rate (Bonferroni, weighted, which
holds whatever the figures' correlation): the *NPU core* (the geometric mean of the
branches' core times: a shift of the whole NPU, what a stack upgrade does, with a relative noise of
about sigma / sqrt(branches) when the branches drift independently, and a threshold learned from its
own history whatever their correlation) gets PRIMARY_SHARE of it, the step, each branch and each stage
share the rest; a regression of the NPU core names every branch's shift.

Each figure's interval is widened by its noise factor (noise.py), learned from the
board's record (board_record: its latest valid runs of the experiment on the run's CPU count, each
key's a series, the runs since the change left out): the history's runs are taken as independent
only as far as that record bears it out.

A run whose host ran faster or slower than in its history (the calibration probe of
harness/results/condition.py outside its history's spread, or another CPU count) is NOT COMPARABLE:
its outcome INCONCLUSIVE, and the verdict says why.

Every verdict's outcome (verdict.py) is PASS, REGRESSION or INCONCLUSIVE, held to the promise
--detect through the primary figure's minimum detectable effect (power.py; docs/verdict.md).
"""
from __future__ import annotations

from dataclasses import replace

from ..constants import LOOKBACK
from ..records import Run
from ..store import ResultsStore
from .decision import MIN_HISTORY
from .figures import STEP
from .history import judge_figures
from .power import DETECT_PCT
from .record import board_record, figure_noise, scope
from .reference import (
    READ_RUNS,
    comparability,
    is_confirmation,
    ran_before,
    reference,
    since_stack_change,
    split,
)
from .verdict import FIRST, HISTORY, NOT_COMPARABLE, UPGRADE, Verdict

__all__ = ["judge", "judge_run", "judge_stored", "confirm", "board_change"]


def judge(store: ResultsStore, run: Run, threshold_pct: float = 10.0, detect_pct: float = DETECT_PCT) -> Verdict:
    """The one call: `run` (measured, not yet stored) judged against its board's accepted stack in
    `store`, its outcome held to the promise `detect_pct`; `threshold_pct` is the fixed rule's, for
    a history too short for a noise estimate (--fixed-threshold)."""
    return judge_run(store, run, threshold_pct, detect_pct)


def judge_run(store: ResultsStore, run: Run, threshold_pct: float, detect_pct: float = DETECT_PCT) -> Verdict:
    """Judge `run` (not yet stored, filed under its board: ResultsStore.filed) against its reference in
    `store` (see the module docstring), held to the promise `detect_pct` (--detect); the judgement
    says when the board's model string changed."""
    return replace(_judge(store, run, threshold_pct, detect_pct), board_change=board_change(store, run),
                   detect_pct=detect_pct)


def board_change(store: ResultsStore, run: Run) -> str | None:
    """'the device-tree model string changed: ...' when the board's latest stored run read another
    model string from the same serial, else None."""
    latest = store.runs(board=run.board_id, latest=1) if run.serial_hash and run.device_model else []
    before = latest[-1] if latest and latest[-1].serial_hash == run.serial_hash else None
    if before is None or before.device_model in (None, run.device_model):
        return None
    return (f"the device-tree model string changed: {before.device_model!r} -> {run.device_model!r} (same serial: "
            f"board {run.board_id} of board model {run.board_model} keeps its history and baseline)")


def _judge(store: ResultsStore, run: Run, threshold_pct: float, detect_pct: float) -> Verdict:
    found = reference(store, run)
    if found is None:
        return Verdict(FIRST, f"no baseline yet for {run.key.case} on board {run.board_id} or its board model "
                              f"{run.board_model}: this run starts the history")
    ref, how, from_fleet, saved = found
    where = scope(run, from_fleet)
    # the runs of the run's own CPU count first, so the newest READ_RUNS of another count do not hide
    # them; with none, all, and comparability names the other count
    pool = store.runs(key=ref.key.digest, valid=True, latest=READ_RUNS, cpus=run.host_cpus, **where) \
        or store.runs(key=ref.key.digest, valid=True, latest=READ_RUNS, **where)
    kind = HISTORY if ref.key.digest == run.key.digest else UPGRADE
    streak = [] if kind == HISTORY or from_fleet else since_stack_change(store, run)
    pool, group, look = split(pool, run, kind, from_fleet, streak)
    probation = revert = None
    if kind == UPGRADE:
        counted = f"the latest {len(pool)}" if len(pool) == READ_RUNS else f"{len(pool)}"
        how = f"{counted} valid run(s) of the accepted stack, reference {how}"
        # the runs of the new stack since the board last ran another, confirming runs apart: a
        # return to a stack from before counts from 1 again
        probation = (0 if is_confirmation(run) else 1) + sum(not is_confirmation(r) for r in streak)
        revert = not from_fleet and ran_before(store, run, ref)
    differences = run.key.differences(ref.key) if kind == UPGRADE else []
    pool, condition, why = comparability(pool, [*group, run])
    if why:
        return Verdict(NOT_COMPARABLE, why, [], differences, ref, condition, probation=probation,
                       history_runs=len(pool), revert=bool(revert))
    # The fixed rule stands in for a short history against a baseline someone saved and for a new
    # stack (a 3x slower one must not pass for lack of history); runs of the accepted stack that merely
    # happened before (a developer's repeated local runs on a busy machine) judge a run once there are
    # enough of them for a learned threshold. Either way a verdict without a noise estimate is never a
    # PASS: INCONCLUSIVE until the accepted stack has MIN_HISTORY valid runs.
    record = board_record(store, run, from_fleet, group)
    verdicts = judge_figures(pool, run, threshold_pct, fixed=saved or kind == UPGRADE, group=group, look=look,
                             record=record, detect_pct=detect_pct)
    if not verdicts:
        how += (f": {len(pool)} earlier valid run(s), too few for a learned threshold ({MIN_HISTORY} needed) "
                "and no saved baseline, so no noise estimate yet")
    step = next((v for v in verdicts if v.label == STEP), None)
    noise = figure_noise(record, STEP, len(pool[-LOOKBACK:]), len(group) + 1, (1 - step.confidence) / 2) \
        if step and step.kind == "history" else None        # the fixed rule has no interval to widen
    if noise and from_fleet:
        noise = replace(noise, whose="the fleet's other boards'")
    return Verdict(kind, how, verdicts, differences, ref, condition, noise, probation=probation,
                     history_runs=len(pool), revert=bool(revert))


def confirm(store: ResultsStore, first_run: Run, first: Verdict, second_run: Run,
            threshold_pct: float, detect_pct: float = DETECT_PCT) -> Verdict:
    """`first` (the judgement of `first_run`, which needs_confirmation) with the judgements of a
    second run of the same session: against the same history as the first run, and as the store will
    judge it once the first run is written (the change's next look, the first run in its group). The
    regression stands when the first says regression (Verdict.regressed); the second is shown.

    A change is then flagged by look 1 only when two runs each say so, and by any later look as
    before: on the kept onnxruntime A/A streams the 4 changes flagged at look 1 were single runs
    whose next run was within its threshold (docs/results-statistics.md). The looks' false-alarm
    rates are as before (the first of two is at most its own); what a regression costs is one more
    run, and only when it is flagged."""
    alone = judge_run(store, second_run, threshold_pct, detect_pct)
    with store.pending([first_run]) as written:         # the store's own queries, the first run in it
        after = judge_run(written, second_run, threshold_pct, detect_pct)
    return replace(first, confirmation=(alone, after))


def judge_stored(store: ResultsStore, run: Run, threshold_pct: float, detect_pct: float = DETECT_PCT,
                 second: Run | None = None) -> Verdict:
    """A stored `run` judged as the gate judged it when it was written: against the store as it was
    before (ResultsStore.as_before), with `second`, the stored run that confirmed or cleared its
    regression, judged as the change's next look (confirm's second judgement)."""
    with store.as_before(run) as before:
        judgement = judge_run(before, run, threshold_pct, detect_pct)
    if second is None or not judgement.needs_confirmation:
        return judgement
    with store.as_before(run) as before:      # the second run against the first one's history
        return replace(judgement, confirmation=(judge_run(before, second, threshold_pct, detect_pct),))
