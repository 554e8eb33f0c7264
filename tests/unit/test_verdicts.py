"""The statistical verdicts: a known shift is found with its interval, identical series are not
flagged, drift that hits both sides of a pair cancels, outliers do not widen a history's threshold,
and change points land where a step was injected."""
import numpy as np
import pytest

from harness.results.verdict.changes import change_points
from harness.results.verdict.decision import Decision, fixed_verdict, history_verdict, paired_verdict


def _drifting_session(rng, pairs, shift, drift=0.08, jitter=0.01):
    """An A/B session's sides A and B timed alternately while the machine drifts by up to `drift`."""
    level = 10.0 * np.exp(np.cumsum(rng.normal(0, drift / np.sqrt(pairs), pairs)))
    base = level * np.exp(rng.normal(0, jitter, pairs))
    cand = level * (1 + shift) * np.exp(rng.normal(0, jitter, pairs))
    return base, cand


def test_line_names_branch_shift_interval_and_threshold():
    v = Decision("paired", "ffn core", 6.84, (5.91, 7.73), 3.0, True, 12)
    assert v.line() == "ffn core +6.8 % [5.9, 7.7] over the 3 % threshold"
    assert Decision("history", "step", -1.04, (-3.0, 0.9), 4.25, False, 9).line() == \
        "step -1.0 % [-3.0, 0.9] within the 4.2 % threshold"
    assert Decision("paired", "load", 5.0, (-1.0, 11.0), 2.0, False, 4).line() == \
        "load +5.0 % [-1.0, 11.0] not clearly over the 2 % threshold"


def test_paired_finds_a_known_shift_inside_its_interval():
    rng = np.random.default_rng(7)
    base, cand = _drifting_session(rng, 12, 0.05)
    v = paired_verdict("ffn core", base, cand, threshold_pct=3)
    assert v.regression and v.n == 12
    assert v.ci_pct[0] < 5 < v.ci_pct[1]
    assert v.ci_pct[0] > 3


def test_paired_ab_sessions_are_rarely_flagged_and_intervals_cover_the_truth():
    rng = np.random.default_rng(11)
    flagged = covered = 0
    for _ in range(400):
        base, cand = _drifting_session(rng, 8, 0.0)
        v = paired_verdict("self core", base, cand, threshold_pct=0.5)
        flagged += v.regression
        covered += v.ci_pct[0] <= 0 <= v.ci_pct[1]
    assert flagged <= 10            # one-sided 2.5 % at 95 % confidence: 10 expected, ~4 allowed noise
    assert 0.92 <= covered / 400 <= 0.98


def test_drift_cancels_in_pairs_but_decides_the_fixed_rule():
    # A 25 % warm-up drift over the session: the unpaired means differ by the drift between the
    # halves, the pairs do not.
    rng = np.random.default_rng(3)
    level = np.linspace(10.0, 12.5, 20)
    base = level[0::2] * np.exp(rng.normal(0, 0.005, 10))
    cand = level[1::2] * np.exp(rng.normal(0, 0.005, 10)) / (level[1::2] / level[0::2])
    assert not paired_verdict("step", base, cand, threshold_pct=3).regression
    assert fixed_verdict("step", level[:10], level[10:]).regression


def test_paired_bootstrap_agrees_with_t():
    rng = np.random.default_rng(5)
    base, cand = _drifting_session(rng, 15, 0.04)
    t = paired_verdict("x", base, cand, threshold_pct=2)
    b = paired_verdict("x", base, cand, threshold_pct=2, method="bootstrap")
    assert b.regression == t.regression
    assert abs(b.shift_pct - t.shift_pct) < 1e-9
    assert abs(b.ci_pct[0] - t.ci_pct[0]) < 0.5 and abs(b.ci_pct[1] - t.ci_pct[1]) < 0.5


def test_paired_refuses_unpaired_and_non_finite_input():
    with pytest.raises(ValueError, match="do not pair"):
        paired_verdict("x", [1, 2, 3], [1, 2], threshold_pct=3)
    with pytest.raises(ValueError, match="finite"):
        paired_verdict("x", [1, 2, float("nan")], [1, 2, 3], threshold_pct=3)
    with pytest.raises(ValueError, match="finite"):
        history_verdict("x", [1, 2, -3, 4, 5], 1.0)


def test_history_flags_a_clear_shift_and_not_an_ordinary_run():
    rng = np.random.default_rng(2)
    history = 100 * np.exp(rng.normal(0, 0.02, 20))
    assert history_verdict("step", history, 100 * np.exp(rng.normal(0, 0.02))).regression is False
    v = history_verdict("step", history, 115.0)
    assert v.regression and v.kind == "history" and v.n == 20
    assert v.threshold_pct >= 3.0 and v.ci_pct[0] < 15 < v.ci_pct[1] + 2


def test_history_false_positive_rate_is_what_it_is_set_to():
    rng = np.random.default_rng(4)
    flagged = sum(history_verdict("s", 50 * np.exp(rng.normal(0, 0.05, 10)),
                                  50 * np.exp(rng.normal(0, 0.05)), floor_pct=0).regression
                  for _ in range(2000))
    assert flagged <= 20            # one-sided 0.5 % at 99 %: 10 expected


def test_history_threshold_learned_from_spread_with_a_floor():
    rng = np.random.default_rng(8)
    quiet = 100 * np.exp(rng.normal(0, 0.002, 15))
    noisy = 100 * np.exp(rng.normal(0, 0.05, 15))
    assert history_verdict("s", quiet, 100.0).threshold_pct == 3.0
    assert history_verdict("s", noisy, 100.0).threshold_pct > 8.0


def test_history_outlier_runs_do_not_widen_the_threshold():
    rng = np.random.default_rng(9)
    history = 100 * np.exp(rng.normal(0, 0.03, 15))
    clean = history_verdict("s", history, 100.0)
    spoiled = history_verdict("s", np.r_[history, 260.0, 30.0], 100.0)
    assert spoiled.threshold_pct == pytest.approx(clean.threshold_pct, rel=0.05)
    assert spoiled.n == clean.n


def test_history_needs_enough_runs_and_looks_back_only_so_far():
    assert history_verdict("s", [1.0, 1.1, 0.9, 1.0], 1.0) is None
    old_level = [200.0] * 20
    recent = list(100 * np.exp(np.random.default_rng(1).normal(0, 0.01, 10)))
    assert not history_verdict("s", old_level + recent, 101.0, lookback=10).regression


def test_history_judges_the_mean_of_several_new_runs():
    rng = np.random.default_rng(6)
    history = 100 * np.exp(rng.normal(0, 0.04, 20))
    one = history_verdict("s", history, [106.0])
    five = history_verdict("s", history, [106.0] * 5)
    assert five.threshold_pct < one.threshold_pct


def test_change_point_found_at_an_injected_step():
    rng = np.random.default_rng(12)
    series = np.r_[rng.normal(100, 2, 14), rng.normal(108, 2, 10)]
    points = change_points(series)
    assert len(points) == 1 and abs(points[0] - 14) <= 1


def test_two_steps_are_two_change_points():
    rng = np.random.default_rng(13)
    series = np.r_[rng.normal(100, 1, 12), rng.normal(110, 1, 12), rng.normal(95, 1, 12)]
    points = change_points(series)
    assert len(points) == 2 and abs(points[0] - 12) <= 1 and abs(points[1] - 24) <= 1


def test_steady_series_have_no_change_point():
    rng = np.random.default_rng(14)
    found = sum(bool(change_points(100 * np.exp(rng.normal(0, 0.05, 30)))) for _ in range(100))
    assert found <= 3
    assert change_points([5.0] * 10) == []
    assert change_points([1.0, 2.0]) == []
