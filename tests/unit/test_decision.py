"""The Decision on one figure: its statistic and p-value agree with its interval and its regression,
hold their level under the null, and match scipy's own t-test; judge_figure gives the look and the reason."""
import numpy as np
import pytest
from scipy import stats

from harness.results.verdict.decision import fixed_verdict, history_verdict, paired_verdict, robust_sd
from harness.results.verdict.history import judge_figure
from harness.results.verdict.looks import look_alpha


@pytest.mark.parametrize("k", [1, 4])
def test_a_history_decisions_p_value_is_its_interval_and_its_regression(k):
    rng = np.random.default_rng(k)
    for _ in range(200):
        history = np.exp(rng.normal(0, 0.03, 20))
        group = np.exp(rng.normal(rng.uniform(0, 0.06), 0.03, k))
        d = history_verdict("x", history, group, confidence=0.98, floor_pct=0.0)
        # the interval's lower end is above 0 exactly when the one-sided p-value is under the level
        assert (d.ci_pct[0] > 0) == (d.p_value < d.level), d
        assert d.regression == (d.p_value < d.level), d
        floored = history_verdict("x", history, group, confidence=0.98)
        assert floored.regression == (floored.p_value < floored.level and floored.shift_pct > 3.0), floored


@pytest.mark.parametrize("shape", [(7,), (8,), (40, 5), (40, 12)])
def test_the_outlier_screens_spread_is_scipys_mad(shape):
    """robust_sd is scipy's median_abs_deviation(scale="normal") on numpy: the same numbers, bit for bit,
    for one history and one per row, odd and even lengths, with ties and a wild run."""
    rng = np.random.default_rng(len(shape) * 10 + shape[-1])
    logs = rng.normal(0, 0.05, shape)
    logs[..., 1] = logs[..., 0]                 # a tie
    logs[..., -1] += 1.5                        # a burst
    median = np.median(logs, axis=-1, keepdims=True)
    assert np.array_equal(robust_sd(logs, median), stats.median_abs_deviation(logs, axis=-1, scale="normal")[..., None])


def test_a_history_decisions_p_value_holds_its_level_with_nothing_changed():
    rng = np.random.default_rng(3)
    p = [history_verdict("x", np.exp(rng.normal(0, 0.02, 25)), np.exp(rng.normal(0, 0.02, 3))).p_value
         for _ in range(2000)]
    low = stats.binomtest(int(np.sum(np.array(p) < 0.05)), len(p)).proportion_ci(0.99)
    assert low.low <= 0.05 <= low.high


def test_a_paired_decisions_p_value_is_scipys_one_sided_t_test():
    rng = np.random.default_rng(5)
    base = np.exp(rng.normal(0, 0.02, 12))
    cand = base * np.exp(rng.normal(0.01, 0.01, 12))
    d = paired_verdict("step", base, cand, threshold_pct=2.0, confidence=0.99)
    expected = stats.ttest_1samp(np.log(cand / base), 0.0, alternative="greater")
    assert d.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    assert d.statistic == pytest.approx(expected.statistic, rel=1e-9)


def test_judge_figure_says_its_look_and_why():
    rng = np.random.default_rng(9)
    earlier = list(np.exp(rng.normal(0, 0.01, 25)))
    alpha = look_alpha(3)
    d = judge_figure("ffn core", earlier, [1.2, 1.21, 1.19], 1 - 2 * alpha, look=3)
    assert d.regression and d.look == 3 and d.runs == 3 and d.level == pytest.approx(alpha)
    assert d.reason().startswith("p = ") and "under its" in d.reason() and "look 3 of its change" in d.reason()
    quiet = judge_figure("ffn core", earlier, [1.0], 1 - 2 * alpha, look=None)
    assert not quiet.regression and "not under its" in quiet.reason() and " within the " in quiet.reason()


def test_the_fixed_rule_has_no_p_value_and_says_so():
    d = fixed_verdict("step", [1.0], [1.2])
    assert d.p_value is None and d.statistic is None and d.regression
    assert d.reason() == "+20.0 % over the fixed 10 % threshold (no noise estimate)"
