"""The looks at one change: the runs since a change are judged as one group, look after look, each
look spending a part of the change's false-alarm rate (alpha spending), shared out over the figures."""
from __future__ import annotations

from ..constants import CONFIDENCE, FIRST_LOOK_SHARE, GROUP_RUNS, PRIMARY_SHARE, SPENDING_RHO
from ..records import Run
from .figures import NPU_CORE

__all__ = ["look_alpha", "confidences", "since_change"]

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


def confidences(labels: list[str], alpha: float) -> dict[str, float]:
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
