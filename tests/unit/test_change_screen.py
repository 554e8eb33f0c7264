"""change_points' permutation test, screened by its first reorderings and drawn in batches
(verdict/changes.py: _differs), decides every segment as the whole test of 1,999 reorderings drawn at
once does: scipy's permutation_test itself, on segments either side of the false-alarm rate."""
from __future__ import annotations

import numpy as np
from scipy import stats

from harness.results.constants import CHANGE_ALPHA, CHANGE_MIN_RUNS
from harness.results.verdict import changes


def _whole_test(segment: np.ndarray, seed: int) -> bool:
    """p < alpha by the permutation test as change_points defines it: 1,999 reorderings, one batch."""
    test = stats.permutation_test((segment,), lambda x, axis: changes._best_split_gain(x, axis, CHANGE_MIN_RUNS),
                                  permutation_type="pairings", vectorized=True, n_resamples=1999,
                                  alternative="greater", rng=np.random.default_rng(seed))
    return bool(test.pvalue < CHANGE_ALPHA)


def _segments() -> list[np.ndarray]:
    """Steady segments, and shifted ones from too small to find to plain, of 6 (every reordering
    tried), 7, 40 and 250 runs: the shifts near the edge put p on both sides of alpha."""
    rng = np.random.default_rng(41)
    out = []
    for size in (6, 7, 40, 250):
        for shift in (0.0, 0.002, 0.004, 0.006, 0.008, 0.01, 0.02):
            for _ in range(3):
                x = np.exp(rng.normal(0, 0.01, size))
                x[size // 2:] *= 1 + shift * (40 / size) ** 0.5
                out.append(x)
    return out


def test_the_screened_test_decides_every_segment_as_the_whole_test():
    segments = _segments()
    screened = [changes._differs(x, CHANGE_ALPHA, CHANGE_MIN_RUNS, seed) for seed, x in enumerate(segments)]
    whole = [_whole_test(x, seed) for seed, x in enumerate(segments)]
    assert screened == whole
    # both decisions are there, and the screen alone said no to most steady segments
    assert 10 < sum(whole) < len(whole) - 10, sum(whole)


def test_a_segment_the_screen_cannot_decide_gets_the_whole_test(monkeypatch):
    # the screen's count is of its own reorderings only: one it leaves open is never called past
    # chance on them; the whole test decides it (a shift found at p < alpha needs all 1,999)
    calls = []
    real = stats.permutation_test
    monkeypatch.setattr(stats, "permutation_test", lambda *a, **k: calls.append(k["n_resamples"]) or real(*a, **k))
    steady = np.exp(np.random.default_rng(1).normal(0, 0.01, 60))
    shifted = steady * np.r_[np.ones(30), np.full(30, 1.03)]
    assert not changes._differs(steady, CHANGE_ALPHA, CHANGE_MIN_RUNS, 0) and calls == [changes._SCREEN]
    calls.clear()
    assert changes._differs(shifted, CHANGE_ALPHA, CHANGE_MIN_RUNS, 0) and calls == [changes._SCREEN, 1999]
