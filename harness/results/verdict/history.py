"""Every figure of a run (with the runs since its change) against the earlier runs of the accepted
stack: the history verdict, widened by the board's noise factor, the fixed rule while there are too
few runs for a spread."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..constants import LOOKBACK
from ..records import Run
from .decision import MIN_HISTORY, Decision, fixed_verdict, history_verdict
from .figures import NPU_CORE, STEP, figures
from .looks import confidences, look_alpha
from .power import DETECT_PCT
from .record import figure_noise

__all__ = ["judge_figures", "judge_values", "judge_figure"]

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
    noise factor of every figure is learned from (noise.py); empty: none learned.
    `detect_pct`: the promise every figure is held to (Decision.outcome); None: none."""
    verdicts = []
    judged = {label: value for label, value in new.items()
              if value > 0 and all(h.get(label, 1.0) > 0 for h in history) and any(label in h for h in history)}
    # every figure is one test: the look's false-alarm rate shared out over them, so a change with
    # nothing in it fails on some figure at some look at most 1 - CONFIDENCE of the time (a lone run
    # with nothing changed: half that)
    confidence = confidences(list(judged), look_alpha(look))
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
    # repetition already (Verdict.needs_confirmation)
    return replace(fixed_verdict(label, earlier[-(MIN_HISTORY - 1):], values, threshold_pct=threshold_pct),
                   runs=len(values), look=look)
