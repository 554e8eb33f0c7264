"""What a new run is compared with, and the verdicts (harness/results/verdicts.py) on each of its figures.

The reference of a run is, in this order:
  1. its board's baseline for its experiment (saved with --save-baseline or --accept-upgrade);
  2. else its board's latest valid run of the experiment;
  3. else the fleet's baseline for the board's model (a new or reflashed board), labelled so;
  4. else nothing: the first run of the experiment, "no baseline yet".
When the reference has the run's own key the comparison is a *history* one: the run against the valid
runs of its key on its board. When the keys differ only in the stack (manifest hash, NPU stack versions,
see records.STACK_FIELDS) it is an *upgrade* comparison: the run against the latest valid runs of the
previous stack. Either way each figure (the step, every branch's core time, every lifecycle stage) gets
a history verdict, the threshold learned from the spread of those runs. With too few of them for a
spread, the fixed rule against the latest one stands in when the reference is a saved baseline; when
it is only the board's latest run, there is no verdict yet, and the judgement says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..model.config import BRANCHES
from ..core.errors import ConfigError
from ..lifecycle.steptimes import STAGE_NAMES
from .records import Run
from .store import ResultsStore
from .verdicts import MIN_HISTORY, Verdict, fixed_verdict, history_verdict

__all__ = ["Judgement", "judge_run", "figures", "judge_figures", "parse_threshold", "HISTORY", "UPGRADE", "FIRST", "STEP",
           "LOOKBACK", "CONFIDENCE"]

HISTORY, UPGRADE, FIRST = "history", "upgrade comparison", "no baseline yet"
STEP = "denoise step"
LOOKBACK = 30       # earlier runs a verdict looks back on (Conbench's lookback window)
CONFIDENCE = 0.99   # of a run's verdict over all its figures


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


def figures(run: Run) -> dict[str, float]:
    """label -> value of every figure judged: 'denoise step', '<branch> core', '<stage> stage'."""
    out = {STEP: run.mean_step_s}
    out.update({f"{b} core": run.branches[b] for b in BRANCHES if b in run.branches})
    out.update({f"{s} stage": run.stages[s] for s in STAGE_NAMES if s in run.stages})
    return out


@dataclass
class Judgement:
    kind: str                       # HISTORY, UPGRADE or FIRST
    reference: str                  # what the run was compared with, in words
    verdicts: list = field(default_factory=list)     # Verdict per figure
    differences: list = field(default_factory=list)  # stack fields that changed (upgrade)
    reference_run: Run | None = None

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.regression]

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def headline(self) -> str:
        if self.kind == FIRST:
            return self.reference
        what = f"{self.kind} against {self.reference}"
        if self.differences:
            what += " (" + "; ".join(self.differences) + ")"
        worst = self.regressions or self.verdicts[:1]
        return what + "".join(": " + v.line() for v in worst[:1]) + "".join("; " + v.line() for v in worst[1:])

    def lines(self) -> list[str]:
        return [self.headline(), *(f"  {v.line()} ({v.kind}, n={v.n})" for v in self.verdicts)]

    def as_dict(self) -> dict:
        return {"kind": self.kind, "reference": self.reference, "differences": self.differences,
                "regressed": self.regressed, "verdicts": [v.as_dict() for v in self.verdicts]}


def judge_figures(pool: list[Run], run: Run, threshold_pct: float, fixed: bool = True) -> list[Verdict]:
    """A verdict per figure of `run` against the runs of `pool` (oldest first); a figure that is 0
    somewhere (a stage a strategy skips) has no relative shift and is left out.

    Too few earlier runs for a spread: with `fixed`, the fixed rule against the latest one (without, no
    verdict for that figure). It fails the run on
    the step alone and names the branches and stages over the threshold as the ones that moved: with no
    noise estimate a 0.4 ms branch moves 30 % between two identical runs on a busy CPU host, the step
    (the old rule's figure) a few %."""
    verdicts = []
    history = [figures(r) for r in pool[-LOOKBACK:]]
    judged = {label: value for label, value in figures(run).items()
              if value > 0 and all(h.get(label, 1.0) > 0 for h in history) and any(label in h for h in history)}
    # every figure is one test: the run's confidence shared out over them (Bonferroni), so a run with
    # nothing changed fails on any figure with at most 1 - CONFIDENCE
    each = 1.0 - (1.0 - CONFIDENCE) / max(len(judged), 1)
    for label, value in judged.items():
        earlier = [h[label] for h in history if label in h]
        verdict = history_verdict(label, earlier, value, confidence=each)
        if verdict is None and fixed:
            verdict = fixed_verdict(label, earlier[-1:], [value], threshold_pct=threshold_pct)
        if verdict is not None:
            verdicts.append(verdict)
    step = next((v for v in verdicts if v.label == STEP), None)
    if step is not None and step.kind == "fixed" and not step.regression:
        verdicts = [replace(v, regression=False) if v.kind == "fixed" else v for v in verdicts]
    return verdicts


def _reference(store: ResultsStore, run: Run) -> tuple[Run, str, bool, bool] | None:
    """(reference run, how it was chosen, from the fleet?, a saved baseline?) or None."""
    saved = store.baseline(run.board_id, run.key.experiment)
    if saved:
        return saved[0], f"the baseline of board {run.board_id} ({saved[1]}, run {saved[0].run_id})", False, True
    latest = store.runs(board=run.board_id, experiment=run.key.experiment, valid=True)
    if latest:
        return latest[-1], f"the latest valid run of board {run.board_id} (run {latest[-1].run_id})", False, False
    fleet = store.fleet_baseline(run.board_model, run.key.experiment, exclude_board=run.board_id)
    if fleet:
        return fleet[0], (f"the fleet's baseline of board model {run.board_model} (board {fleet[0].board_id}, "
                          f"run {fleet[0].run_id}): this board has none of its own yet"), True, True
    return None


def judge_run(store: ResultsStore, run: Run, threshold_pct: float) -> Judgement:
    """Judge `run` (not yet stored) against its reference in `store` (see the module docstring)."""
    found = _reference(store, run)
    if found is None:
        return Judgement(FIRST, f"no baseline yet for {run.key.case} on board {run.board_id} or its board model "
                                f"{run.board_model}: this run starts the history")
    reference, how, from_fleet, saved = found
    scope = {"board_model": run.board_model} if from_fleet else {"board": run.board_id}
    pool = [r for r in store.runs(key=reference.key.digest, valid=True, **scope)
            if r.board_id != run.board_id or not from_fleet]
    kind = HISTORY if reference.key.digest == run.key.digest else UPGRADE
    if kind == UPGRADE:
        how = f"{len(pool)} valid run(s) of the previous stack, reference {how}"
    # The fixed rule stands in for a short history only against a baseline someone saved: runs that
    # merely happened before (a developer's repeated local runs on a busy machine) judge a run once
    # there are enough of them for a learned threshold.
    verdicts = judge_figures(pool, run, threshold_pct, fixed=saved)
    if not verdicts:
        how += (f": {len(pool)} earlier valid run(s), too few for a learned threshold ({MIN_HISTORY} needed) "
                "and no saved baseline, so no verdict yet")
    return Judgement(kind, how, verdicts, run.key.differences(reference.key) if kind == UPGRADE else [], reference)
