"""The calibration probe's verdict: whether the host ran as fast as in the history a run would be
judged against (harness/results/condition.py measures it)."""
from __future__ import annotations

from dataclasses import replace

from .decision import Decision, history_verdict

__all__ = ["probe_verdict", "PROBE_LABEL"]

PROBE_LABEL = "calibration probe"


def probe_verdict(history: list[float], probes: list[float], confidence: float) -> Decision | None:
    """The new run(s)' probe against the probes of the history they would be judged by, two-sided:
    None when too few history runs have one; else a Decision whose `regression` means "not comparable"
    (the machine ran slower or faster than in that history by more than the probe's spread)."""
    # the probe's floor is the figures' (HISTORY_FLOOR_PCT): below it their own threshold absorbs the
    # machine's speed
    verdict = history_verdict(PROBE_LABEL, history, probes, confidence=confidence)
    if verdict is None:
        return None
    return replace(verdict, regression=abs(verdict.shift_pct) > verdict.threshold_pct)
