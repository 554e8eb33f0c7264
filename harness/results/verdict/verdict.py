"""The verdict on one benchmark run: what it was compared with, a Decision per figure, its outcome
(PASS, REGRESSION or INCONCLUSIVE, held to the promise --detect), its minimum detectable effect and,
when INCONCLUSIVE, what would decide it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..constants import GROUP_RUNS, LOOKBACK
from ..records import Run
from .decision import HISTORY_FLOOR_PCT, MIN_HISTORY, Decision
from .figures import NPU_CORE, STEP
from .noise import NoiseFactor
from .outcome import Outcome
from .power import DETECT_PCT, more_runs

__all__ = ["Verdict", "group_note", "HISTORY", "UPGRADE", "FIRST", "NOT_COMPARABLE"]

HISTORY, UPGRADE, FIRST, NOT_COMPARABLE = "history", "upgrade comparison", "no baseline yet", "not comparable"


@dataclass
class Verdict:
    kind: str                       # HISTORY, UPGRADE, FIRST or NOT_COMPARABLE
    reference: str                  # what the run was compared with, in words
    verdicts: list = field(default_factory=list)     # Decision per figure
    differences: list = field(default_factory=list)  # stack fields that changed (upgrade)
    reference_run: Run | None = None
    condition: Decision | None = None                 # the calibration probe against its history
    noise: NoiseFactor | None = None                 # the step's noise factor, for the record's size
    confirmation: tuple = ()                         # a second run's Verdicts (confirm)
    probation: int | None = None                     # upgrade: which run of the new stack this is
    board_change: str | None = None                  # the board's device-tree model string changed (board_change)
    detect_pct: float = DETECT_PCT                   # the promise (--detect) the verdict is held to
    history_runs: int = 0                            # earlier valid runs of the accepted stack judged against
    revert: bool = False                             # upgrade: back to a stack the board ran before the accepted one

    @property
    def primary(self) -> Decision | None:
        """The figure the outcome's power is read from: of the step (what the user waits for) and the
        NPU core (a shift of the whole NPU, what a stack upgrade does, with most of the look's
        false-alarm rate), the one that could detect the smaller slowdown. A 25 % slower step or
        NPU is then found 95 % of the time by that figure; the other can only add to it."""
        judged = [v for v in self.verdicts if v.label in (NPU_CORE, STEP)]
        return min(judged, key=lambda v: v.mde_pct, default=None)

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
