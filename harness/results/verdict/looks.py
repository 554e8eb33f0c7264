"""The looks at one change: the runs since a change are judged as one group, look after look, each
look spending a part of the change's false-alarm rate (alpha spending), shared out over the figures."""
from __future__ import annotations

import functools
import math

import numpy as np

from ..constants import CONFIDENCE, FIRST_LOOK_SHARE, GROUP_RUNS, PRIMARY_SHARE, SPENDING_RHO
from ..records import Run
from .figures import NPU_CORE

__all__ = ["look_alpha", "spent", "confidences", "since_change"]

# the grid the looks' boundaries are computed on: +-10 sd of the last look's sum, 2,001 points
_GRID_SD, _GRID_POINTS = 10.0, 2001


def look_alpha(look: int | None, rho: float = SPENDING_RHO, first: float = FIRST_LOOK_SHARE) -> float:
    """The one-sided level look `look` (1..GROUP_RUNS: the run and the runs before it since the change)
    is judged at, so that a change with nothing in it is flagged by one of its looks with the change's
    1 - CONFIDENCE in all; a run judged alone (None) is its own family, at the one-sided half of its
    two-sided CONFIDENCE. `rho`: the spending's exponent; `first`: look 1's part (`spent`).

    The looks of one change are not separate tests: look 5's group holds look 4's runs, so a change
    that look 4 did not flag is unlikely to be flagged by look 5 by chance alone. Each look's level is
    the group-sequential boundary (`_boundaries`): the level at which the chance of a first crossing
    at that look, given no crossing before, is exactly its part of the change's rate. These levels
    sum to more than 1 - CONFIDENCE (look 5's is 1.53 times its part), where a Bonferroni split would
    spend each part as a level of its own and give away look 5's power: +5 % found within 5 runs on
    94.2 % of 3,900 simulated boards with it, 95.8 % of 4,000 with these (docs/results-statistics.md)."""
    if look is None:
        return (1.0 - CONFIDENCE) / 2
    if not 1 <= look <= GROUP_RUNS:
        raise ValueError(f"look {look}: a change has looks 1 to {GROUP_RUNS}")
    return _boundaries(rho, first)[look - 1]


def spent(look: int, rho: float = SPENDING_RHO, first: float = FIRST_LOOK_SHARE) -> float:
    """Look `look`'s part of the change's false-alarm rate 1 - CONFIDENCE (alpha spending). Look 1
    gets a large part (`first`): the first run of a change may be its only one (CI runs once per
    commit; an upgrade is gated on its first run), so it must not lose much of a lone run's power to
    looks that may never come. Looks 2..GROUP_RUNS spend the rest by Kim and DeMets' power family
    (exponent `rho`), little on look 2, whose group is small, most on the last."""
    alpha = 1.0 - CONFIDENCE
    if look == 1:
        return alpha * first
    later, j = GROUP_RUNS - 1, look - 1
    return alpha * (1 - first) * ((j / later) ** rho - ((j - 1) / later) ** rho)


@functools.cache
def _boundaries(rho: float, first: float) -> tuple[float, ...]:
    """Each look's one-sided level: look k flags when S_k, the sum of the k runs' standardized
    shifts, reaches b_k, and b_k is set so that P(S_1 < b_1, .., S_(k-1) < b_(k-1), S_k >= b_k) is
    look k's part (`spent`). The sums' joint law is that of a random walk with unit steps (the
    runs are independent; a shared history only raises the looks' correlation, which makes these
    levels conservative, as the noise factor does for runs that are not): the density of S_k on the
    paths not yet stopped is carried look to look on a grid (Armitage, McPherson and Rowe's
    recursion), and b_k found where the probability of crossing it is the part."""
    from scipy import stats
    x = np.linspace(-_GRID_SD, _GRID_SD, _GRID_POINTS) * math.sqrt(GROUP_RUNS)
    h = float(x[1] - x[0])
    reach = int(_GRID_SD / h)                   # one unit step's density, out to _GRID_SD of it
    unit = stats.norm.pdf(np.arange(-reach, reach + 1) * h) * h
    levels: list[float] = []
    density = np.zeros_like(x)                  # S_(k-1)'s on the paths not yet stopped (none for look 1)
    for look in range(1, GROUP_RUNS + 1):
        part = spent(look, rho, first)
        if look == 1:
            b, density = float(stats.norm.isf(part)), stats.norm.pdf(x)
        else:
            b = _boundary(density, x, h, part)
            density = np.convolve(density, unit, mode="same")
        levels.append(float(stats.norm.sf(b / math.sqrt(look))))
        density = np.where(x < b, density, 0.0)
    return tuple(levels)


def _boundary(before: np.ndarray, x: np.ndarray, h: float, part: float) -> float:
    """Where the next sum, one unit step past the density `before` (on grid `x`, spacing `h`), is
    crossed with probability `part`."""
    from scipy import optimize, stats
    return float(optimize.brentq(lambda b: float(np.sum(before * stats.norm.sf(b - x)) * h) - part,
                                 0.0, float(x[-1]), xtol=1e-10))


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
