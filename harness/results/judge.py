"""What a new run is compared with, and the verdicts (harness/results/verdicts.py) on each of its figures.

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
that run against the same history, and as the change's next look with the first run in its group. One
run disturbed far past its history is what a single run's verdict cannot tell from a regression; a real
one is there in the second run too. A group's verdict has its repetition already.

The figures of one look are one family sharing its false-alarm rate (Bonferroni, weighted, which
holds whatever the figures' correlation): the *NPU core* (the geometric mean of the
branches' core times: a shift of the whole NPU, what a stack upgrade does, with a relative noise of
about sigma / sqrt(branches) when the branches drift independently, and a threshold learned from its
own history whatever their correlation) gets PRIMARY_SHARE of it, the step, each branch and each stage
share the rest; a regression of the NPU core names every branch's shift.

Each figure's interval is widened by its noise factor (harness/results/noise.py), learned from the
board's record (board_record: its latest valid runs of the experiment on the run's CPU count, each
key's a series, the runs since the change left out): the history's runs are taken as independent
only as far as that record bears it out.

A run whose host ran faster or slower than in its history (the calibration probe of
harness/results/condition.py outside its history's spread, or another CPU count) is NOT COMPARABLE:
neither a pass nor a regression, and the judgement says why.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..core.errors import ConfigError
from ..lifecycle.steptimes import STAGE_NAMES
from ..model.config import BRANCHES
from .condition import condition_line, probe_verdict
from .constants import CONFIDENCE, FIRST_LOOK_SHARE, GROUP_RUNS, LOOKBACK, NOISE_LOOKBACK, PRIMARY_SHARE, SPENDING_RHO
from .noise import NoiseFactor, noise_factor
from .records import Run
from .store import ResultsStore
from .verdict.outcome import Outcome
from .verdict.power import DETECT_PCT, more_runs
from .verdicts import HISTORY_FLOOR_PCT, MIN_HISTORY, Decision, fixed_verdict, history_verdict

__all__ = ["Judgement", "judge_run", "judge_stored", "confirm", "is_confirmation", "since_stack_change", "figures",
           "judge_figure", "judge_figures", "judge_values",
           "parse_threshold", "since_change",
           "comparability", "npu_core", "group_note", "HISTORY", "UPGRADE", "FIRST", "NOT_COMPARABLE", "STEP",
           "NPU_CORE", "LOOKBACK", "CONFIDENCE", "GROUP_RUNS", "PRIMARY_SHARE", "SPENDING_RHO", "FIRST_LOOK_SHARE",
           "look_alpha", "board_change", "board_record", "record_of", "record_before", "same_cpus", "figure_noise",
           "READ_RUNS"]

HISTORY, UPGRADE, FIRST, NOT_COMPARABLE = "history", "upgrade comparison", "no baseline yet", "not comparable"
STEP = "denoise step"
NPU_CORE = "NPU core"   # geometric mean of the branches' core times per step
# Runs of a key read from the store for one judgement: the noise factor's record; the lookback, a
# change's group and the host's condition need fewer. A fleet's store holds thousands, each with
# its subgraphs' rows, and a verdict must not read them all.
READ_RUNS = max(NOISE_LOOKBACK, LOOKBACK + GROUP_RUNS)


def parse_threshold(text, option: str = "--baseline-threshold") -> float:
    """'10%' or '10' -> 10.0 (percent over the reference that counts as a regression)."""
    raw = str(text).strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{option} {text!r}: expected a percentage such as 10%") from None
    if not 0 < value < 1000:
        raise ConfigError(f"{option} {text!r}: must be between 0 and 1000 %")
    return value


def npu_core(branches: dict[str, float]) -> float | None:
    """The NPU core figure: the geometric mean of the branches' core seconds per step (its log is the
    mean of their logs, so each branch's relative shift counts alike), None with fewer than two."""
    cores = [branches[b] for b in BRANCHES if b in branches]
    if len(cores) < 2 or not all(c > 0 for c in cores):
        return None
    return math.exp(sum(math.log(c) for c in cores) / len(cores))


def figures(run: Run) -> dict[str, float]:
    """label -> value of every figure judged: 'denoise step', 'NPU core' (with two branches or more),
    '<branch> core', '<stage> stage'."""
    out = {STEP: run.mean_step_s}
    npu = npu_core(run.branches)
    if npu is not None:
        out[NPU_CORE] = npu
    out.update({f"{b} core": run.branches[b] for b in BRANCHES if b in run.branches})
    out.update({f"{s} stage": run.stages[s] for s in STAGE_NAMES if s in run.stages})
    return out


@dataclass
class Judgement:
    kind: str                       # HISTORY, UPGRADE, FIRST or NOT_COMPARABLE
    reference: str                  # what the run was compared with, in words
    verdicts: list = field(default_factory=list)     # Decision per figure
    differences: list = field(default_factory=list)  # stack fields that changed (upgrade)
    reference_run: Run | None = None
    condition: Decision | None = None                 # the calibration probe against its history
    noise: NoiseFactor | None = None                 # the step's noise factor, for the record's size
    confirmation: tuple = ()                         # a second run's Judgements (confirm)
    probation: int | None = None                     # upgrade: which run of the new stack this is
    board_change: str | None = None                  # the board's device-tree model string changed (board_change)
    detect_pct: float = DETECT_PCT                   # the promise (--detect) the verdict is held to
    history_runs: int = 0                            # earlier valid runs of the accepted stack judged against
    revert: bool = False                             # upgrade: back to a stack the board ran before the accepted one

    @property
    def primary(self) -> Decision | None:
        """The figure the outcome's power is read from: the NPU core (a shift of the whole NPU, what a
        stack upgrade does, seen with the least noise and most of the look's false-alarm rate), else
        the step."""
        return next((v for v in self.verdicts if v.label == NPU_CORE), None) or \
            next((v for v in self.verdicts if v.label == STEP), None)

    @property
    def outcome(self) -> Outcome | None:
        """REGRESSION (confirmed where a second run was judged), INCONCLUSIVE (not comparable, too few
        runs for a noise estimate, or a primary figure that could not have found the promised
        slowdown) or PASS; None only for the first run of an experiment, which has nothing to be
        judged against and starts the history."""
        if self.kind == FIRST:
            return None
        if self.regressed:
            return Outcome.REGRESSION
        primary = self.primary
        if self.kind == NOT_COMPARABLE or primary is None or not primary.mde_pct <= self.detect_pct:
            return Outcome.INCONCLUSIVE
        return Outcome.PASS

    @property
    def mde_pct(self) -> float:
        """The primary figure's minimum detectable effect (inf: no noise estimate)."""
        primary = self.primary
        return primary.mde_pct if primary else math.inf

    def decider(self) -> str:
        """What would decide an INCONCLUSIVE verdict ('' otherwise)."""
        if self.outcome is not Outcome.INCONCLUSIVE:
            return ""
        ab = "an interleaved A/B session (bin/harness bench-ab: its pairs cancel the drift)"
        if self.kind == NOT_COMPARABLE:
            return f"to decide it: a run on a machine as quiet as in its history, or {ab}"
        primary = self.primary
        if primary is None or primary.spread_log is None:
            short = MIN_HISTORY - (primary.n if primary and primary.kind == "history" else self.history_runs)
            return (f"to decide it: {max(short, 1)} more valid run(s) of the accepted stack give a noise estimate, "
                    f"or {ab}")
        more = more_runs(primary.spread_log, primary.level, primary.n, primary.runs, self.detect_pct,
                         HISTORY_FLOOR_PCT, LOOKBACK, GROUP_RUNS if primary.look else 1)
        if more is None:
            return (f"to decide it: no number of runs here will (the history's noise, log sd "
                    f"{100 * primary.spread_log:.1f} %, is too wide for the promised {self.detect_pct:g} %): "
                    f"{ab}, or a quieter board")
        history, group = more
        said = [f"{history} more valid run(s) of the accepted stack" if history is not None else None,
                f"{group} more run(s) of this change judged with it" if group is not None else None]
        return "to decide it: " + " or ".join(x for x in said if x) + f"; or {ab}"

    @property
    def regressions(self) -> list[Decision]:
        return [v for v in self.verdicts if v.regression]

    @property
    def regressed(self) -> bool:
        """A regression of this run, confirmed by the second run where one was judged (confirm): the
        second run judged against the same history must find it too. Its judgement as the change's
        next look (the first run in its group) is shown, not counted: the group's mean holds the first
        run, so one disturbed run would confirm itself there, now that a group's spread no longer
        absorbs it (issue 41). A second run on a machine not comparable with the history confirms
        nothing and clears nothing: the first run's regression stands."""
        return bool(self.regressions) and (not self.confirmation or self.confirmation[0].regressed
                                           or self._second_not_comparable)

    @property
    def _second_not_comparable(self) -> bool:
        return bool(self.confirmation) and self.confirmation[0].kind == NOT_COMPARABLE

    @property
    def needs_confirmation(self) -> bool:
        """Whether a second run must confirm this run's regression before it fails: it was judged
        from this one run alone (look 1 of a change, or a run judged alone), and one run disturbed
        far past its history (one branch of one run +40-130 % on onnxruntime here) is what such a
        verdict cannot tell from a regression. A group's verdict has its repetition already."""
        return bool(self.regressions) and not self.confirmation and all(v.runs == 1 for v in self.regressions)

    def headline(self) -> str:
        return self._headline() + (f"; {self.board_change}" if self.board_change else "")

    def _headline(self) -> str:
        if self.kind == FIRST:
            return self.reference
        if self.kind == NOT_COMPARABLE:
            return f"{NOT_COMPARABLE}: {self.reference}"
        what = f"{self.kind} against {self.reference}" if self.probation is None else \
            f"revert under probation, run {self.probation} of a stack this board ran before the accepted one, " \
            f"against {self.reference}" if self.revert else \
            f"upgrade under probation, run {self.probation} of the new stack, against {self.reference}"
        if self.differences:
            what += " (" + "; ".join(self.differences) + ")"
        worst = self.regressions or [v for v in (self.primary,) if v is not None]
        return what + "".join(": " + v.line() for v in worst[:1]) + "".join("; " + v.line() for v in worst[1:]) \
            + self._branches_of_npu(worst) + self._over_but_not_failed() + self._confirmed()

    @property
    def moved(self) -> Decision | None:
        """The figure whose verdict fails while the step's does not (the first such), else None: what
        a one-line summary of the run must name besides, or instead of, the step."""
        if any(v.label == STEP for v in self.regressions):
            return None
        return next(iter(self.regressions), None)

    def _over_but_not_failed(self) -> str:
        """'; ffn core +12.0 % over the 10 % threshold, ...': the figures over the fixed rule's threshold
        when the step is not (the fixed rule fails a run on the step alone), so they are in the
        headline rather than in a sub-line only."""
        if self.regressions:
            return ""
        over = sorted((v for v in self.verdicts if v.kind == "fixed" and v.label != STEP
                       and v.shift_pct > v.threshold_pct), key=lambda v: -v.shift_pct)
        return "".join(f"; {v.label} {v.shift_pct:+.1f} % over the {v.threshold_pct:g} % threshold, not failed: "
                       "the fixed rule fails a run on its step alone" for v in over[:1]) + \
            "".join(f"; {v.label} {v.shift_pct:+.1f} %" for v in over[1:])

    def _confirmed(self) -> str:
        """'; confirmed by a second run: ...' or '; not confirmed by a second run (...): ...'."""
        if not self.confirmation or not self.regressions:
            return ""
        if self._second_not_comparable:
            return f"; a second run could neither confirm nor clear it ({self.confirmation[0].headline()})"
        second = self.confirmation[0]
        shown = (second.regressions or second.verdicts)[:1]
        said = "; ".join(v.line() for v in shown) or second.headline()
        if self.regressed:
            return f"; confirmed by a second run: {said}"
        return f"; not confirmed by a second run ({said}): one disturbed run, not a regression"

    def _branches_of_npu(self, shown: list[Decision]) -> str:
        """A regression of the whole NPU names each branch's own shift and interval."""
        if not any(v.label == NPU_CORE and v.regression for v in shown):
            return ""
        branches = sorted((v for v in self.verdicts if v.label.endswith(" core") and v.label != NPU_CORE
                           and v not in shown), key=lambda v: -v.shift_pct)     # the branch that moved first
        return "".join(f"; {v.shift()}" for v in branches)

    def verdict_line(self) -> str:
        """'PASS: <headline>', 'REGRESSION: ...', 'INCONCLUSIVE: ...; to decide it: ...': the one line a
        gate, `results check` and the site say; the first run's is its headline."""
        if self.outcome is None:
            return self.headline()
        decider = self.decider()
        return f"{self.outcome.name}: {self.headline()}" + (f"; {decider}" if decider else "")

    def lines(self) -> list[str]:
        noise = [f"  noise factor: {self.noise.note()}"] if self.noise else []
        second = [f"  second run, {what}: {c.headline()}"
                  for c, what in zip(self.confirmation, ("against the same history", "as the change's next look"))]
        return [self.headline(), *noise, *(f"  {v.line()} ({v.kind}, n={v.n}{group_note(v)})" for v in self.verdicts),
                *second]

    def as_dict(self) -> dict:
        return {"kind": self.kind, "reference": self.reference, "differences": self.differences,
                "regressed": self.regressed, "verdicts": [v.as_dict() for v in self.verdicts],
                "condition": self.condition.as_dict() if self.condition else None,
                "noise": vars(self.noise) if self.noise else None, "probation": self.probation,
                "confirmation": [c.as_dict() for c in self.confirmation], "board_change": self.board_change,
                "outcome": str(self.outcome) if self.outcome else None, "detect_pct": self.detect_pct,
                "mde_pct": self.mde_pct if math.isfinite(self.mde_pct) else None, "revert": self.revert}


def group_note(verdict: Decision) -> str:
    """', mean of the 3 runs since the change' for a group verdict ('' for one run), and
    ', noise x2.4' when the board's record widened its interval (noise.py)."""
    return (f", mean of the {verdict.runs} runs since the change" if verdict.runs > 1 else "") + \
        (f", noise x{verdict.widened:.2g}" if verdict.widened > 1 else "")


def look_alpha(look: int | None, rho: float = SPENDING_RHO, first: float = FIRST_LOOK_SHARE) -> float:
    """The false-alarm rate (one-sided) of look `look` (1..GROUP_RUNS: the run and the runs before it
    since the change), its part of the change's 1 - CONFIDENCE; a run judged alone (None) is its own
    family, at the one-sided half of its two-sided CONFIDENCE. `rho`: the spending's exponent;
    `first`: look 1's part.

    Look 1 gets a large part (FIRST_LOOK_SHARE): the first run of a change may be its only one (CI
    runs once per commit; an upgrade is gated on its first run), so it must not lose much of a lone
    run's power to looks that may never come. Looks 2..GROUP_RUNS spend the rest by the power family,
    little on look 2, whose group is small, most on the last. The parts sum to the change's alpha, so
    by Bonferroni (the union bound) the sequence of looks holds it whatever their correlation."""
    alpha = 1.0 - CONFIDENCE
    if look is None:
        return alpha / 2
    if not 1 <= look <= GROUP_RUNS:
        raise ValueError(f"look {look}: a change has looks 1 to {GROUP_RUNS}")
    if look == 1:
        return alpha * first
    later, j = GROUP_RUNS - 1, look - 1
    return alpha * (1 - first) * ((j / later) ** rho - ((j - 1) / later) ** rho)


def _confidences(labels: list[str], alpha: float) -> dict[str, float]:
    """Each figure's confidence: the look's false-alarm rate `alpha` shared out (weighted Bonferroni,
    which holds whatever the figures' correlation): PRIMARY_SHARE to the NPU core, the rest evenly.
    A figure's part a is one-sided (only a slowdown fails), so its interval is the two-sided 1 - 2a
    one: its lower end is the one-sided bound the regression is decided by."""
    others = [label for label in labels if label != NPU_CORE]
    if NPU_CORE not in labels or not others:
        return {label: 1.0 - 2 * alpha / max(len(labels), 1) for label in labels}
    return {label: 1.0 - 2 * (alpha * PRIMARY_SHARE if label == NPU_CORE else alpha * (1 - PRIMARY_SHARE) / len(others))
            for label in labels}


def since_change(pool: list[Run], run: Run) -> tuple[list[Run], list[Run], int | None]:
    """(history, group, look): the runs of `pool` (oldest first) before the change, the earlier runs of
    `run`'s git revision after it and `run`'s look at the change (len(group) + 1: 1 for the first run
    of a new revision), when the revision changed within the pool or with `run` and has had at most
    GROUP_RUNS runs counting `run`; else (pool, [], None), `run` judged alone."""
    revision = run.git_revision
    trailing = 0
    while revision is not None and trailing < len(pool) and pool[-1 - trailing].git_revision == revision:
        trailing += 1
    if revision is None or trailing == len(pool) or trailing + 1 > GROUP_RUNS:
        return pool, [], None
    return pool[:len(pool) - trailing], pool[len(pool) - trailing:], trailing + 1


def judge_figures(pool: list[Run], run: Run, threshold_pct: float, fixed: bool = True,
                  group: Sequence[Run] = (), look: int | None = None,
                  record: Sequence[list[dict]] = (), detect_pct: float | None = DETECT_PCT) -> list[Decision]:
    """A verdict per figure of `run` (with `group`, the earlier runs since the change: their mean)
    against the runs of `pool` (oldest first), at the false-alarm rate of its `look` at the change
    (look_alpha; None: judged alone); a figure that is 0 somewhere (a stage a strategy skips) has no
    relative shift and is left out.

    Too few earlier runs for a spread: with `fixed`, the fixed rule, the mean of `group` and `run`
    against the mean of the latest earlier runs (without, no verdict for that figure). It fails the run on
    the step alone and names the branches and stages over the threshold as the ones that moved: with no
    noise estimate a 0.4 ms branch moves 30 % between two identical runs on a busy CPU host, the step
    (the old rule's figure) a few %. `record`: the board's record the noise factor is learned from
    (board_record)."""
    return judge_values([figures(r) for r in pool[-LOOKBACK:]], [figures(g) for g in group], figures(run),
                        threshold_pct, fixed, look, record, detect_pct)


def judge_values(history: list[dict], group: list[dict], new: dict, threshold_pct: float,
                 fixed: bool = True, look: int | None = None, record: Sequence[list[dict]] = (),
                 detect_pct: float | None = DETECT_PCT) -> list[Decision]:
    """judge_figures on the figures themselves (label -> value per run, as `figures` gives them).
    `look`: `new`'s look at its change (len(group) + 1, as since_change gives it), None for a run
    judged alone. `record`: series of figures (each a key's runs on the board, oldest first) the
    noise factor of every figure is learned from (harness/results/noise.py); empty: none learned.
    `detect_pct`: the promise every figure is held to (Decision.outcome); None: none."""
    verdicts = []
    judged = {label: value for label, value in new.items()
              if value > 0 and all(h.get(label, 1.0) > 0 for h in history) and any(label in h for h in history)}
    # every figure is one test: the look's false-alarm rate shared out over them, so a change with
    # nothing in it fails on some figure at some look at most 1 - CONFIDENCE of the time (a lone run
    # with nothing changed: half that)
    confidence = _confidences(list(judged), look_alpha(look))
    for label, value in judged.items():
        earlier = [h[label] for h in history if label in h]
        values = [g[label] for g in group if g.get(label, 0) > 0] + [value]
        decision = judge_figure(label, earlier, values, confidence[label], look, record, threshold_pct, fixed)
        if decision is not None:
            verdicts.append(replace(decision, detect_pct=detect_pct))
    step = next((v for v in verdicts if v.label == STEP), None)
    if step is not None and step.kind == "fixed" and not step.regression:
        verdicts = [replace(v, regression=False) if v.kind == "fixed" else v for v in verdicts]
    return verdicts


def judge_figure(label: str, earlier: list[float], values: list[float], confidence: float, look: int | None,
                 record: Sequence[list[dict]] = (), threshold_pct: float = 10.0, fixed: bool = True) -> Decision | None:
    """The Decision on one figure: `values` (the runs since the change, the judged run last) against the
    `earlier` runs' values, at `confidence` (two-sided; its one-sided half is the figure's part of the
    look's false-alarm rate), the interval widened by the figure's noise factor learned from `record`.
    Too few earlier runs: with `fixed`, the fixed rule against the latest of them (not for the NPU
    core); else None."""
    widen = figure_noise(record, label, len(earlier[-LOOKBACK:]), len(values), (1 - confidence) / 2).factor \
        if len(earlier) >= MIN_HISTORY else 1.0         # too few for an interval: nothing to widen
    decision = history_verdict(label, earlier, values, confidence=confidence, widen=widen)
    if decision is not None:
        return replace(decision, look=look)
    # the NPU core is there to average the branches' drift away: the fixed rule has no noise
    # estimate to gain from it, and the branches name the shift themselves
    if not fixed or label == NPU_CORE:
        return None
    # the runs since the change together, as a group's look judges them: a group's verdict has its
    # repetition already (Judgement.needs_confirmation)
    return replace(fixed_verdict(label, earlier[-(MIN_HISTORY - 1):], values, threshold_pct=threshold_pct),
                   runs=len(values), look=look)


def figure_noise(record: Sequence[list[dict]], label: str, n: int, k: int, alpha: float) -> NoiseFactor:
    """The noise factor of one figure for a group of k runs against n earlier ones, judged at the
    one-sided level `alpha` (noise.py)."""
    return noise_factor([[r[label] for r in series if r.get(label, 0) > 0] for series in record], n, k, alpha)


def board_record(store: ResultsStore, run: Run, from_fleet: bool = False,
                 group: Sequence[Run] = ()) -> list[list[dict]]:
    """The figures of the latest NOISE_LOOKBACK valid runs of `run`'s experiment on its board (on the
    other boards of its model when it is judged against the fleet) and its CPU count, one series per
    board, key and CPU count, oldest first, the runs of its `group` left out: what the noise factor
    is learned from."""
    found = store.runs(experiment=run.key.experiment, valid=True, latest=NOISE_LOOKBACK + len(group),
                       cpus=run.host_cpus, **_scope(run, from_fleet))
    # a fleet's history interleaves its boards, and so does its record: one series in time order
    return record_of(found, group, by_board=not from_fleet)


def _scope(run: Run, from_fleet: bool) -> dict:
    """The store filters for the runs `run` is judged by: its board's, or its board model's other boards'."""
    return {"board_model": run.board_model, "other_than_board": run.board_id} if from_fleet else {"board": run.board_id}


def record_of(runs: list[Run], group: Sequence[Run] = (), by_board: bool = True) -> list[list[dict]]:
    """board_record on runs at hand (valid, oldest first, all before the run judged): the latest
    NOISE_LOOKBACK of them but the runs of `group` (a change must not widen its own interval), one
    series of figures per board (with `by_board`), key and CPU count (a step between CPU counts is
    another machine, not noise)."""
    leave_out = {(g.run_id, g.key.case) for g in group}
    kept = [r for r in runs if (r.run_id, r.key.case) not in leave_out]
    series: dict[tuple, list[dict]] = {}
    for r in kept[-NOISE_LOOKBACK:]:
        series.setdefault((r.board_id if by_board else None, r.key.digest, r.host_cpus), []).append(figures(r))
    return list(series.values())


def record_before(runs: list[Run], run: Run, group: Sequence[Run] = ()) -> list[list[dict]]:
    """board_record on runs at hand (oldest first, `run` among them or newer than them all): the
    valid runs of `run`'s experiment on its board and CPU count that came before it."""
    upto = next((i for i, r in enumerate(runs) if r is run), len(runs))      # as the gate saw it
    return record_of([r for r in runs[:upto] if r.valid and r.board_id == run.board_id
                      and r.key.experiment == run.key.experiment and same_cpus(run, r)], group)


def same_cpus(run: Run, other: Run) -> bool:
    """Whether `other` ran on `run`'s CPU count (either without one recorded counts as the same):
    the Python twin of store.runs(cpus=)."""
    return run.host_cpus is None or other.host_cpus in (None, run.host_cpus)


def _reference(store: ResultsStore, run: Run) -> tuple[Run, str, bool, bool] | None:
    """(reference run, how it was chosen, from the fleet?, a saved baseline?) or None: a run of the
    board's accepted stack (the module docstring), never merely its latest run, so a new stack stays
    on probation run after run until it is accepted."""
    saved = store.baseline(run.board_id, run.key.experiment)
    if saved:
        return saved[0], f"the baseline of board {run.board_id} ({saved[1]}, run {saved[0].run_id})", False, True
    # no baseline: the stack the board first ran the experiment on with a valid run
    accepted = next((digest for digest, _, valid in store.stacks(run.board_id, run.key.experiment) if valid), None)
    latest = store.runs(board=run.board_id, key=accepted, valid=True, latest=1) if accepted else []
    if latest:
        return latest[-1], f"the latest valid run of board {run.board_id} (run {latest[-1].run_id})", False, False
    fleet = store.fleet_baseline(run.board_model, run.key.experiment, exclude_board=run.board_id)
    if fleet:
        return fleet[0], (f"the fleet's baseline of board model {run.board_model} (board {fleet[0].board_id}, "
                          f"run {fleet[0].run_id}): this board has none of its own yet"), True, True
    return None


def judge_run(store: ResultsStore, run: Run, threshold_pct: float, detect_pct: float = DETECT_PCT) -> Judgement:
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


def _judge(store: ResultsStore, run: Run, threshold_pct: float, detect_pct: float) -> Judgement:
    found = _reference(store, run)
    if found is None:
        return Judgement(FIRST, f"no baseline yet for {run.key.case} on board {run.board_id} or its board model "
                                f"{run.board_model}: this run starts the history")
    reference, how, from_fleet, saved = found
    scope = _scope(run, from_fleet)
    # the runs of the run's own CPU count first, so the newest READ_RUNS of another count do not hide
    # them; with none, all, and comparability names the other count
    pool = store.runs(key=reference.key.digest, valid=True, latest=READ_RUNS, cpus=run.host_cpus, **scope) \
        or store.runs(key=reference.key.digest, valid=True, latest=READ_RUNS, **scope)
    kind = HISTORY if reference.key.digest == run.key.digest else UPGRADE
    streak = [] if kind == HISTORY or from_fleet else since_stack_change(store, run)
    pool, group, look = _split(pool, run, kind, from_fleet, streak)
    probation = revert = None
    if kind == UPGRADE:
        counted = f"the latest {len(pool)}" if len(pool) == READ_RUNS else f"{len(pool)}"
        how = f"{counted} valid run(s) of the accepted stack, reference {how}"
        # the runs of the new stack since the board last ran another, confirming runs apart: a
        # return to a stack from before counts from 1 again
        probation = (0 if is_confirmation(run) else 1) + sum(not is_confirmation(r) for r in streak)
        revert = not from_fleet and _ran_before(store, run, reference)
    differences = run.key.differences(reference.key) if kind == UPGRADE else []
    pool, condition, why = comparability(pool, [*group, run])
    if why:
        return Judgement(NOT_COMPARABLE, why, [], differences, reference, condition, probation=probation,
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
    return Judgement(kind, how, verdicts, differences, reference, condition, noise, probation=probation,
                     history_runs=len(pool), revert=bool(revert))


def is_confirmation(run: Run) -> bool:
    """A run the gate measured to confirm or clear another's regression (gates.benchmark.decide)."""
    return run.run_id.endswith("-confirm")


def since_stack_change(store: ResultsStore, run: Run) -> list[Run]:
    """The board's runs of `run`'s experiment since it last ran another stack, all of `run`'s key,
    oldest first (at most READ_RUNS): what a probation counts and its looks are made of."""
    recent = store.runs(board=run.board_id, experiment=run.key.experiment, latest=READ_RUNS)
    start = len(recent)
    while start and recent[start - 1].key.digest == run.key.digest:
        start -= 1
    return recent[start:]


def _ran_before(store: ResultsStore, run: Run, reference: Run) -> bool:
    """Whether the board ran `run`'s stack before the accepted one (`reference`'s) first ran: a return
    to it is a revert."""
    order = [digest for digest, _, _ in store.stacks(run.board_id, run.key.experiment)]
    return run.key.digest in order and reference.key.digest in order and \
        order.index(run.key.digest) < order.index(reference.key.digest)


def confirm(store: ResultsStore, first_run: Run, first: Judgement, second_run: Run,
            threshold_pct: float, detect_pct: float = DETECT_PCT) -> Judgement:
    """`first` (the judgement of `first_run`, which needs_confirmation) with the judgements of a
    second run of the same session: against the same history as the first run, and as the store will
    judge it once the first run is written (the change's next look, the first run in its group). The
    regression stands when the first says regression (Judgement.regressed); the second is shown.

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
                 second: Run | None = None) -> Judgement:
    """A stored `run` judged as the gate judged it when it was written: against the store as it was
    before (ResultsStore.as_before), with `second`, the stored run that confirmed or cleared its
    regression, judged as the change's next look (confirm's second judgement)."""
    with store.as_before(run) as before:
        judgement = judge_run(before, run, threshold_pct, detect_pct)
    if second is None or not judgement.needs_confirmation:
        return judgement
    with store.as_before(run) as before:      # the second run against the first one's history
        return replace(judgement, confirmation=(judge_run(before, second, threshold_pct, detect_pct),))


def _split(pool: list[Run], run: Run, kind: str, from_fleet: bool,
           streak: list[Run]) -> tuple[list[Run], list[Run], int | None]:
    """(history, group since the change, look): for an upgrade the group is the valid runs of the new
    stack since the board last ran another (`streak`) while they are fewer than GROUP_RUNS; for a
    history, see since_change."""
    if from_fleet:
        return pool, [], None
    if kind == HISTORY:
        return since_change(pool, run)
    ours = [r for r in streak if r.valid][-GROUP_RUNS:]
    return (pool, ours, len(ours) + 1) if len(ours) + 1 <= GROUP_RUNS else (pool, [], None)


def comparability(pool: list[Run], judged: list[Run]) -> tuple[list[Run], Decision | None, str | None]:
    """(the history runs of the judged runs' CPU count, the probe's verdict, why not comparable or None).

    The judged runs (the group since the change and the new run, last) are compared with the runs of
    `pool` on the same number of CPUs; when the new run and enough of those carry a calibration probe,
    the judged runs' probes are judged against theirs, both ways (condition.probe_verdict)."""
    run = judged[-1]
    if run.host_cpus is not None:
        same = [r for r in pool if same_cpus(run, r)]
        if pool and not same:
            cpus = sorted({r.host_cpus for r in pool}, key=lambda c: -1 if c is None else c)   # None: not recorded
            return pool, None, f"the history ran on {cpus} CPUs, this run on {run.host_cpus}"
        pool = same
    probes = [r.host_probe_s for r in pool[-LOOKBACK:] if r.host_probe_s is not None]
    mine = [r.host_probe_s for r in judged if r.host_probe_s is not None]
    if run.host_probe_s is None:
        return pool, None, None
    verdict = probe_verdict(probes, mine, CONFIDENCE)
    if verdict is None or not verdict.regression:
        return pool, verdict, None
    then = [r.host_load for r in pool[-LOOKBACK:] if r.host_load is not None]
    history = f"load {sum(then) / len(then):.2f} per CPU on average" if then else "no load recorded"
    faster = "faster" if verdict.shift_pct < 0 else "slower"
    return pool, verdict, (f"{verdict.line()}: this machine ran {faster} than in the {verdict.n} runs it would be "
                           f"judged against ({condition_line(run.host_cpus, run.host_load, run.host_probe_s)} "
                           f"now; {history} in the history), so its times say nothing about the stack; "
                           f"run it on a quiet machine or use the interleaved A/B session")
