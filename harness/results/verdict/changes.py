"""Change points over a history: where a new level starts (E-Divisive's structure)."""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..constants import CHANGE_ALPHA, CHANGE_MIN_RUNS

__all__ = ["change_points"]

_RESAMPLES = 1999       # the permutation test's reorderings
# scipy draws each batch of reorderings from the seeded stream in turn, so the batch changes no
# draw, only the memory: 1,999 x 250 values at once took 3x the time of batches of 100 here
_BATCH = 100
_SCREEN = 200           # the reorderings that decide most segments alone (_differs)


def change_points(values: Sequence[float], *, alpha: float = CHANGE_ALPHA,
                  min_size: int = CHANGE_MIN_RUNS) -> list[int]:
    """Indices where a new level starts in a history (oldest first), e.g. [12] when runs 12.. are
    slower or faster than runs ..11.

    E-Divisive's structure (Apache Otava's algorithm): binary segmentation, every split kept only
    when a permutation test says the two sides differ (p < `alpha`), then both sides searched
    again. ruptures' Binseg finds each segment's best split (least squares: a shift of the mean)
    and scipy's permutation test judges it by the same statistic over reorderings of the segment,
    so the best-of-all-splits selection is part of the null and `alpha` is the false-alarm rate
    per search. Otava itself is not a dependency: it pins numpy 2.2 and scipy < 1.17 (the suite
    runs newer ones) and brings the BigQuery, Slack and Graphite clients along."""
    series = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(series)):
        raise ValueError("change_points: every value must be finite")
    found: list[int] = []
    _split(series, 0, series.size, alpha, min_size, found)
    return sorted(found)


def _split(series: np.ndarray, start: int, stop: int, alpha: float, min_size: int,
           found: list[int]) -> None:
    import ruptures
    segment = series[start:stop]
    if segment.size < 2 * min_size or np.ptp(segment) == 0 or not _differs(segment, alpha, min_size, start):
        return
    # the test's statistic is the best split's gain whichever split it is: found only when it counts
    algo = ruptures.Binseg(model="l2", min_size=min_size, jump=1).fit(segment.reshape(-1, 1))
    cut = algo.predict(n_bkps=1)[0]
    found.append(start + cut)
    _split(series, start, start + cut, alpha, min_size, found)
    _split(series, start + cut, stop, alpha, min_size, found)


def _differs(segment: np.ndarray, alpha: float, min_size: int, seed: int) -> bool:
    """Whether the permutation test of _RESAMPLES reorderings (seeded with `seed`) puts the segment's
    best split past chance: p < `alpha`, p = (reorderings at least as good + 1) / (_RESAMPLES + 1).

    Its first _SCREEN reorderings are the same draws (the same seeded stream, taken in order), so
    when they alone reach the count at which p >= alpha, the rest cannot bring p under it: a segment
    with no change (most of a lab's series' figures) is decided by them, ~25x sooner, and the full
    test runs only when they do not decide. A segment short enough for every reordering to be tried
    (scipy's exact test, not a draw) skips the screen."""
    from scipy import stats

    def test(resamples: int):
        return stats.permutation_test((segment,), lambda x, axis: _best_split_gain(x, axis, min_size),
                                      permutation_type="pairings", vectorized=True, n_resamples=resamples,
                                      batch=_BATCH, alternative="greater", rng=np.random.default_rng(seed))
    if math.factorial(min(segment.size, 20)) > _RESAMPLES:      # 20! reorderings: drawn, never all tried
        screened = round(test(_SCREEN).pvalue * (_SCREEN + 1))     # the count, with scipy's + 1
        if screened / (_RESAMPLES + 1) >= alpha:
            return False
    return bool(test(_RESAMPLES).pvalue < alpha)


def _best_split_gain(x: np.ndarray, axis: int, min_size: int) -> np.ndarray:
    """The largest drop in squared error that one split into a left and a right mean gives (what
    Binseg's l2 cost maximises), over splits leaving `min_size` values each side."""
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    total = np.cumsum(x, axis=-1)
    k = np.arange(1, n)
    diff = total[..., :-1] / k - (total[..., -1:] - total[..., :-1]) / (n - k)
    gain = k * (n - k) / n * diff * diff
    return gain[..., min_size - 1:n - min_size].max(axis=-1)
