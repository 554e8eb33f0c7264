"""The noise factor (harness/results/verdict/noise.py): a board's record of runs that are not independent
widens the history verdict's interval so that a steady change keeps its false-alarm rate, and a
record of independent runs leaves it nearly as it was.

The series are seeded: an AR(1) process (each run's log drifts from the one before) stands for
back-to-back runs on a busy host, measured here with a lag-1 autocorrelation of 0.80-0.89."""
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from harness.results.constants import GROUP_RUNS, LOOKBACK
from harness.results.store import ResultsStore
from harness.results.verdict import noise
from harness.results.verdict.decision import history_verdict
from harness.results.verdict.figures import NPU_CORE, STEP, figures
from harness.results.verdict.history import judge_values
from harness.results.verdict.judging import judge_run
from harness.results.verdict.noise import NOISE_LOOKBACK, noise_factor, standardized_shifts
from harness.results.verdict.record import board_record, record_of
from harness.results.verdict.reference import READ_RUNS
from harness.results.verdict.verdict import HISTORY, NOT_COMPARABLE
from tests.results_data import make_run

pytestmark = pytest.mark.results

HISTORY_RUNS = 20
RECORD = 240        # a board's record in the store tests: long enough to learn from, quick to write


def _ar1(phi: float, sd: float, count: int, seed: int) -> np.ndarray:
    """`count` run times around 1.0 whose logs follow an AR(1) with coefficient phi and a stationary
    standard deviation `sd`."""
    rng = np.random.default_rng(seed)
    shocks = rng.normal(0, sd * math.sqrt(1 - phi ** 2), count)
    logs = np.empty(count)
    logs[0] = rng.normal(0, sd)
    for i in range(1, count):
        logs[i] = phi * logs[i - 1] + shocks[i]
    return np.exp(logs)


def _verdict_t(history, group) -> float:
    """history_verdict's statistic (shift over the standard error), as its Decision gives it."""
    return history_verdict("x", history, group, confidence=0.99, floor_pct=0.0).statistic


@pytest.mark.parametrize("k", [1, 3, 5])
def test_the_shifts_the_factor_is_learned_from_are_the_verdicts_own_statistic(k):
    rng = np.random.default_rng(k)
    values = np.exp(0.05 * rng.standard_t(3, 90))      # heavy tails: the outlier screen has work to do
    t, df = standardized_shifts(np.log(values), HISTORY_RUNS, k)
    assert t.size == values.size - HISTORY_RUNS - k + 1
    for j in (HISTORY_RUNS, 41, values.size - k):
        expected = _verdict_t(values[j - HISTORY_RUNS:j], values[j:j + k])
        assert t[j - HISTORY_RUNS] == pytest.approx(expected, rel=1e-9)


def _windows(values: np.ndarray, windows: int, with_record: bool) -> int:
    """Changes with nothing in them flagged by any of their looks: each window is the board's
    NOISE_LOOKBACK runs, the last HISTORY_RUNS of them the history, then GROUP_RUNS runs after."""
    flagged = 0
    span = NOISE_LOOKBACK + GROUP_RUNS
    for w in range(windows):
        figures = [{STEP: float(v)} for v in values[w * span:(w + 1) * span]]
        record = [figures[:NOISE_LOOKBACK]] if with_record else []
        history, after = figures[NOISE_LOOKBACK - HISTORY_RUNS:NOISE_LOOKBACK], figures[NOISE_LOOKBACK:]
        flagged += any(any(v.regression for v in judge_values(history, after[:k], after[k], 10.0, look=k + 1,
                                                              record=record)) for k in range(GROUP_RUNS))
    return flagged


@pytest.mark.slow
def test_serially_correlated_runs_keep_the_false_alarm_rate_with_the_factor():
    windows = 400
    values = _ar1(0.9, 0.05, windows * (NOISE_LOOKBACK + GROUP_RUNS), seed=11)
    without = _windows(values, windows, with_record=False)
    learned = _windows(values, windows, with_record=True)
    assert stats.binomtest(without, windows).proportion_ci(0.95).low > 0.05, without    # taken as independent
    assert learned / windows <= 0.01, (learned, without)


def test_independent_runs_are_barely_widened_and_a_slowdown_is_still_found():
    factors = []
    for seed in range(40):
        values = np.exp(np.random.default_rng(seed).normal(0, 0.02, NOISE_LOOKBACK))
        factors.append(noise_factor([values], HISTORY_RUNS, 1).factor)
    # widened only where a record happens to look like evidence (about 1 in 100 per ratio: CONFIDENCE)
    assert sum(f > 1 for f in factors) <= 4, np.round(factors, 2)
    values = np.exp(np.random.default_rng(99).normal(0, 0.02, NOISE_LOOKBACK))
    figures = [{STEP: float(v)} for v in values]
    slow = {STEP: 1.10 * float(np.exp(np.mean(np.log(values))))}
    verdict = judge_values(figures[-HISTORY_RUNS:], [], slow, 10.0, look=1, record=[figures])[0]
    assert verdict.regression and verdict.widened < 1.35, verdict


def test_a_record_with_disturbed_runs_widens_a_lone_runs_interval():
    # independent runs with a heavy tail (Student t, 2.5 degrees of freedom): no drift to speak of,
    # but now and then a run far past the rest, as a run another job disturbed
    factors = [noise_factor([np.exp(0.03 * np.random.default_rng(seed).standard_t(2.5, NOISE_LOOKBACK))],
                            HISTORY_RUNS, 1, alpha=1e-4).factor for seed in range(10)]
    normal = [noise_factor([np.exp(0.03 * np.random.default_rng(seed).normal(size=NOISE_LOOKBACK))],
                           HISTORY_RUNS, 1, alpha=1e-4).factor for seed in range(10)]
    assert min(factors) > 1.5 and max(normal) < 1.5, (np.round(factors, 2), np.round(normal, 2))


def test_a_short_record_needs_more_evidence_and_the_series_of_each_key_are_apart():
    # a record without two positions learns nothing; one more run and it learns from both
    runs = np.exp(np.random.default_rng(8).normal(0, 0.05, HISTORY_RUNS + 2))
    assert noise_factor([runs[:-1]], HISTORY_RUNS, 1).positions == 0
    assert noise_factor([runs], HISTORY_RUNS, 1).positions == 2
    # independent runs' ratios vary more over fewer positions: each evidence bar is higher there
    short, long = (noise._independent_ratios(p, HISTORY_RUNS, 1, 0.005) for p in (40, 200))
    assert all(few > many > 1 for few, many in zip(short, long)), (short, long)
    drifting = _ar1(0.95, 0.05, 200, seed=5)
    # two keys' series side by side: no position straddles them, so a level between keys is no noise
    apart = noise_factor([drifting[:100], drifting[100:] * 1.5], HISTORY_RUNS, 1)
    assert apart.positions == 2 * (100 - HISTORY_RUNS)
    joined = noise_factor([np.r_[drifting[:100], drifting[100:] * 1.5]], HISTORY_RUNS, 1)
    assert joined.factor > apart.factor


def _judged(store, value: float):
    run = replace(make_run("new", value, minute=RECORD + 10), git_revision="r2")
    judgement = judge_run(store, run, 10.0)
    return judgement, next(v for v in judgement.verdicts if v.label == NPU_CORE)    # the narrowest interval


def _log_half(verdict) -> float:
    return (math.log1p(verdict.ci_pct[1] / 100) - math.log1p(verdict.ci_pct[0] / 100)) / 2


def test_the_store_learns_the_noise_from_the_boards_record_and_says_so(results_url):
    times = _ar1(0.9, 0.05, RECORD, seed=4)
    runs = [replace(make_run(f"r{i}", float(t), minute=i), git_revision="r1") for i, t in enumerate(times)]
    lookback = 30                       # the verdict's history (judge.LOOKBACK)
    with ResultsStore(results_url) as store:
        for run in runs[-lookback:]:    # the history alone: too few positions to learn from
            store.add_run(run)
        young, young_core = _judged(store, 1.0)
        # at the NPU core's own level (its share of look 1's part), as the judgement learns it
        factor = noise_factor([times], lookback, 1, (1 - young_core.confidence) / 2).factor
        # a run between the two thresholds: a regression when the runs are taken as independent, not
        # once the record has shown how far neighbouring runs drift together
        between = math.exp(-math.log1p(young_core.shift_pct / 100) + _log_half(young_core) * (1 + factor) / 2)
        young_between, _ = _judged(store, between)
        for run in runs[:-lookback]:
            store.add_run(run)
        learned, learned_core = _judged(store, between)
    assert young.kind == HISTORY and "noise factor: not learned yet" in "\n".join(young.lines())
    assert young_core.widened == 1.0 and young_between.regressed, young_between.lines()
    assert learned.noise.positions == RECORD - lookback and factor > 1.1, learned.lines()
    assert learned_core.widened == pytest.approx(factor)
    assert _log_half(learned_core) == pytest.approx(factor * _log_half(young_core), rel=1e-6)
    assert "noise x" in "\n".join(learned.lines()) and not learned.regressed, learned.lines()


class _CountingStore(ResultsStore):
    """The real store, keeping how many runs each read returned."""
    reads: list[int] = []

    def runs(self, **filters):
        found = super().runs(**filters)
        self.reads.append(len(found))
        return found


@pytest.mark.slow
def test_a_judgement_reads_only_the_runs_it_needs_and_judges_as_over_all_of_them(tmp_path):
    # more valid runs than any part of a verdict looks at (a fleet's store holds thousands, each with
    # its subgraphs' rows): the judgement must come out as it would over all of them, and no read of
    # the store may return them all
    total = READ_RUNS + 40
    times = _ar1(0.5, 0.05, total, seed=9)
    runs = [replace(make_run(f"r{i}", float(t), minute=i), git_revision="r1") for i, t in enumerate(times)]
    new = replace(make_run("new", 1.08, minute=total + 1), git_revision="r1")      # judged alone
    with _CountingStore(f"sqlite:///{tmp_path / 'results.sqlite'}") as store:
        for run in runs:
            store.add_run(run)
        store.reads = []
        judgement = judge_run(store, new, 10.0)
        reads = store.reads
    by_hand = judge_values([figures(r) for r in runs[-LOOKBACK:]], [], figures(new), 10.0,
                           record=record_of(runs))
    assert [v.line() for v in judgement.verdicts] == [v.line() for v in by_hand]
    assert judgement.noise.positions == NOISE_LOOKBACK - LOOKBACK
    assert reads and max(reads) <= READ_RUNS < total, reads


def test_the_latest_runs_come_oldest_first_and_other_boards_apart(results_url):
    with ResultsStore(results_url) as store:
        for i in range(6):
            store.add_run(make_run(f"r{i}", minute=i, board="rock-5c-aaaa" if i % 2 else "rock-5c-bbbb"))
        assert [r.run_id for r in store.runs(latest=3)] == ["r3", "r4", "r5"]
        assert [r.run_id for r in store.runs(latest=2, other_than_board="rock-5c-aaaa")] == ["r2", "r4"]
        assert [r.run_id for r in store.runs(latest=10, board="rock-5c-aaaa")] == ["r1", "r3", "r5"]


def _on(run, cpus: int):
    return replace(run, host_cpus=cpus)


@pytest.mark.slow
def test_a_run_on_a_cpu_count_the_newest_runs_do_not_have_is_judged_against_its_own(tmp_path):
    # 50 runs on 4 CPUs, then more than a judgement reads on 8: a new run on 4 CPUs is judged against
    # the 4-CPU runs, as over the whole store, not called "not comparable" for the 8-CPU ones
    times = _ar1(0.3, 0.02, 50 + READ_RUNS, seed=12)
    runs = [_on(replace(make_run(f"r{i}", float(t), minute=i), git_revision="r1"), 4 if i < 50 else 8)
            for i, t in enumerate(times)]
    new = _on(replace(make_run("new", 1.0, minute=len(runs) + 1), git_revision="r1"), 4)
    with ResultsStore(f"sqlite:///{tmp_path / 'results.sqlite'}") as store:
        for run in runs:
            store.add_run(run)
        judgement = judge_run(store, new, 10.0)
        other = judge_run(store, _on(new, 2), 10.0)
    assert judgement.kind == HISTORY and judgement.verdicts, judgement.lines()
    by_hand = judge_values([figures(r) for r in runs[50 - LOOKBACK:50]], [], figures(new), 10.0,
                           record=[[figures(r) for r in runs[:50]]])
    assert [v.line() for v in judgement.verdicts] == [v.line() for v in by_hand]
    assert other.kind == NOT_COMPARABLE and "CPUs, this run on 2" in other.reference, other.lines()


def test_the_record_keeps_cpu_counts_and_a_changes_own_runs_out(results_url):
    # a board that moved from 4 to 8 CPUs: the step between them is another machine, not noise, so
    # an 8-CPU run is judged with the 8-CPU runs' noise; and the runs since a change do not widen
    # the interval that judges them
    quiet = np.exp(np.random.default_rng(13).normal(0, 0.01, 240))
    runs = [_on(replace(make_run(f"r{i}", float(t) * (1.25 if i < 120 else 1.0), minute=i), git_revision="r1"),
                4 if i < 120 else 8) for i, t in enumerate(quiet)]
    group = [_on(replace(make_run(f"g{i}", 1.06, minute=300 + i), git_revision="r2"), 8) for i in range(2)]
    new = _on(replace(make_run("new", 1.06, minute=310), git_revision="r2"), 8)
    with ResultsStore(results_url) as store:
        for run in [*runs, *group]:
            store.add_run(run)
        judgement = judge_run(store, new, 10.0)
        record = board_record(store, new, group=group)
    assert [len(s) for s in record] == [120]        # the 8-CPU runs only, the change's own left out
    assert judgement.noise.factor < 2, judgement.lines()
    assert judgement.regressed, judgement.lines()


@pytest.mark.slow
def test_a_new_board_judged_by_the_fleet_learns_from_the_fleets_runs_and_says_so(tmp_path):
    # ten boards' runs interleaved, as the fleet's history interleaves them: a new board judged by
    # the fleet's baseline learns the noise from that mixed history, not from per-board pieces too
    # short for a 31-run position
    times = np.exp(np.random.default_rng(16).normal(0, 0.03, 400))
    runs = [make_run(f"r{i}", float(t), minute=i, board=f"rock-5c-{i % 10:04x}aaaa") for i, t in enumerate(times)]
    new = make_run("new", 1.0, minute=500, board="rock-5c-bbbb")
    with ResultsStore(f"sqlite:///{tmp_path / 'results.sqlite'}") as store:
        for run in runs:
            store.add_run(run)
        store.set_baseline(runs[-1], "saved")
        judgement = judge_run(store, new, 10.0)
    assert "fleet's baseline" in judgement.reference, judgement.lines()
    assert judgement.noise.whose == "the fleet's other boards'"
    assert judgement.noise.positions == NOISE_LOOKBACK - LOOKBACK, judgement.lines()
    assert "the fleet's other boards' valid runs" in "\n".join(judgement.lines())


def test_results_check_learns_a_runs_noise_from_the_runs_before_it(tmp_path):
    # an old stack's quiet series, then a new stack's long drifting record: `check` judges the
    # board's latest run as the gate did when it was written, its noise learned from the runs before
    # it, and not the later runs'
    from harness.cli.results import check_lines
    from tests.results_data import VERSIONS_NEW
    quiet = np.exp(np.random.default_rng(14).normal(0, 0.02, 40))
    old = [replace(make_run(f"o{i}", float(t), minute=i), git_revision="r1") for i, t in enumerate(quiet)]
    drifting = _ar1(0.95, 0.1, 260, seed=15)
    new = [replace(make_run(f"n{i}", float(t), minute=100 + i, versions=VERSIONS_NEW), git_revision="r1")
           for i, t in enumerate(drifting)]
    with ResultsStore(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.add_runs(old + [new[0]])
        lines, _ = check_lines(store, store.runs(), 10.0, 25.0)
        assert "latest run n0" in lines[0] and not any("noise x" in line for line in lines), lines
        store.add_runs(new[1:])
        lines, _ = check_lines(store, store.runs(), 10.0, 25.0)
    assert "latest run n259" in lines[0] and any("noise x" in line for line in lines), lines
