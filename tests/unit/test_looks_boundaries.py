"""The looks at one change (harness/results/verdict/looks.py): each look's level is the group-sequential
boundary whose first crossings are the look's part of the change's alpha. Checked against scipy's
multivariate normal (Genz's integration), a method independent of the grid recursion the levels come
from, and by simulated changes with nothing in them."""
import math

import numpy as np
import pytest
from scipy import stats

from harness.results.constants import CONFIDENCE, GROUP_RUNS
from harness.results.verdict.looks import look_alpha, spent

pytestmark = pytest.mark.results


def _first_crossings(levels: list[float]) -> list[float]:
    """P(look k is the first to flag) for standardized cumulative sums of independent runs (look j
    and look k correlate as sqrt(j / k)), flagging at the one-sided `levels`."""
    bounds = stats.norm.isf(levels)
    looks = np.arange(1, len(levels) + 1)
    corr = np.sqrt(np.minimum.outer(looks, looks) / np.maximum.outer(looks, looks))
    rng = np.random.default_rng(1)
    below = [1.0] + [float(stats.multivariate_normal.cdf(bounds[:k], np.zeros(k), corr[:k, :k], maxpts=100_000,
                                                         abseps=1e-7, releps=0, rng=rng)) for k in looks]
    return [below[k - 1] - below[k] for k in looks]


def test_each_looks_first_crossings_are_its_part_and_the_parts_are_the_changes_alpha():
    levels = [look_alpha(k) for k in range(1, GROUP_RUNS + 1)]
    parts = [spent(k) for k in range(1, GROUP_RUNS + 1)]
    assert sum(parts) == pytest.approx(1.0 - CONFIDENCE)
    assert _first_crossings(levels) == pytest.approx(parts, rel=0.02, abs=2e-6)
    # judged at the parts themselves (Bonferroni), the looks would spend less than the alpha: the
    # power the boundaries give back, most of it on the last look
    assert sum(_first_crossings(parts)) < 0.85 * (1.0 - CONFIDENCE)
    assert levels[-1] > 1.4 * parts[-1] and levels[0] == pytest.approx(parts[0])


def test_random_walks_with_nothing_in_them_cross_at_the_changes_alpha():
    rng = np.random.default_rng(41)
    walks = np.cumsum(rng.normal(size=(400_000, GROUP_RUNS)), axis=1) / np.sqrt(np.arange(1, GROUP_RUNS + 1))
    flagged = np.any(walks > stats.norm.isf([look_alpha(k) for k in range(1, GROUP_RUNS + 1)]), axis=1)
    low, high = stats.binomtest(int(flagged.sum()), flagged.size).proportion_ci(0.99)
    assert low <= 1.0 - CONFIDENCE <= high, (flagged.mean(), low, high)
    assert math.isclose(look_alpha(None), (1.0 - CONFIDENCE) / 2)
