"""The history verdict judges the runs since a change as one group, tests a shift of the whole NPU on
the NPU core (naming every branch), and refuses to compare runs whose host ran at another speed.

The store is real (SQLite and PostgreSQL through `results_url`); the runs are built the way the
benchmark gate builds them (tests/results_data.py)."""
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from harness.model.config import BRANCHES
from harness.results.condition import HostCondition, probe_seconds
from harness.results.constants import CONFIDENCE, FIRST_LOOK_SHARE, GROUP_RUNS, PRIMARY_SHARE
from harness.results.records import ResultsError
from harness.results.store import ResultsStore
from harness.results.verdict.decision import history_verdict
from harness.results.verdict.figures import NPU_CORE, STEP
from harness.results.verdict.history import judge_values
from harness.results.verdict.judging import judge_run
from harness.results.verdict.looks import look_alpha, since_change
from harness.results.verdict.looks import spent as looks_spent
from harness.results.verdict.verdict import HISTORY, NOT_COMPARABLE, UPGRADE
from tests.results_data import VERSIONS_NEW, make_run

pytestmark = pytest.mark.results

# log-noise of the earlier runs: 2 % spread, fixed so the verdicts are fixed too
_NOISE = np.random.default_rng(3).normal(0, 0.02, 40)


def _runs(prefix: str, count: int, step: float, start: int, revision: str = "r1", noise_from: int = 0, **kw):
    return [replace(make_run(f"{prefix}{i}", step * float(np.exp(_NOISE[(noise_from + i) % len(_NOISE)])),
                             minute=start + i, **kw), git_revision=revision) for i in range(count)]


def _store_with(store: ResultsStore, runs) -> None:
    for run in runs:
        store.add_run(run)


def test_the_mean_of_the_runs_since_a_change_is_caught_where_each_run_alone_is_not(results_url):
    history = _runs("old", 12, 1.0, 0)
    after = _runs("new", GROUP_RUNS, 1.06, 100, revision="r2", noise_from=20)
    with ResultsStore(results_url) as store:
        _store_with(store, history)
        alone = judge_run(store, after[0], 10.0)
        assert alone.kind == HISTORY and not alone.regressed, alone.lines()
        _store_with(store, after[:-1])
        grouped = judge_run(store, after[-1], 10.0)
    assert grouped.regressed, grouped.lines()
    worst = grouped.regressions[0]
    assert worst.runs == GROUP_RUNS and worst.n == 12
    assert "mean of the 5 runs since the change" in "\n".join(grouped.lines())
    # each of the 5 runs alone: within its threshold
    for run in after:
        v = history_verdict("s", [r.mean_step_s for r in history], run.mean_step_s, confidence=0.99)
        assert not v.regression


def test_a_change_is_grouped_for_its_first_runs_only():
    pool = _runs("old", 10, 1.0, 0) + _runs("new", 3, 1.0, 50, revision="r2")
    run = _runs("x", 1, 1.0, 60, revision="r2")[0]
    history, group, look = since_change(pool, run)
    assert len(history) == 10 and [r.run_id for r in group] == ["new0", "new1", "new2"] and look == 4
    assert since_change(pool[:10], run) == (pool[:10], [], 1)   # the first run of the new revision
    late = pool + _runs("more", GROUP_RUNS, 1.0, 70, revision="r2")
    assert since_change(late, run) == (late, [], None)          # the change has had its 5 runs
    assert since_change(pool[:10], replace(run, git_revision="r1")) == (pool[:10], [], None)   # no change
    assert since_change(pool, replace(run, git_revision=None)) == (pool, [], None)             # unknown revision


def _spent(judgement) -> float:
    """The part of the run's false-alarm rate a judgement spent: over its figures, the one-sided
    level of each (its interval is the two-sided 1 - 2 x level one)."""
    return sum((1.0 - v.confidence) / 2 for v in judgement.verdicts)


def _judge_and_add(store: ResultsStore, runs) -> list:
    judgements = []
    for run in runs:
        judgements.append(judge_run(store, run, 10.0))
        store.add_run(run)
    return judgements


def test_the_looks_at_one_change_share_its_alpha_and_a_lone_run_keeps_its_own(results_url):
    alpha = 1.0 - CONFIDENCE
    with ResultsStore(results_url) as store:
        _store_with(store, _runs("old", 12, 1.0, 0))
        (alone,) = _judge_and_add(store, _runs("same", 1, 1.0, 50, noise_from=12))     # no change: alone
        looks = _judge_and_add(store, _runs("new", GROUP_RUNS + 1, 1.0, 100, revision="r2", noise_from=20))
    assert alone.kind == HISTORY and len(alone.verdicts) == 9 and _spent(alone) == pytest.approx(alpha / 2)
    spent = [_spent(j) for j in looks[:GROUP_RUNS]]
    assert [j.verdicts[0].runs for j in looks] == [*range(1, GROUP_RUNS + 1), 1]
    # the whole sequence is one family: each look judged at its boundary, whose first crossings are
    # the look's part of the alpha (test_looks_boundaries), the parts summing to it
    assert spent == pytest.approx([look_alpha(k) for k in range(1, GROUP_RUNS + 1)])
    assert sum(looks_spent(k) for k in range(1, GROUP_RUNS + 1)) == pytest.approx(alpha)
    assert spent[0] == pytest.approx(alpha * FIRST_LOOK_SHARE)        # a change's first run: most of a lone run's
    assert spent[1:] == sorted(spent[1:]) and spent[-1] > spent[-2]  # of the later looks, the fifth spends most
    assert _spent(looks[GROUP_RUNS]) == pytest.approx(alpha / 2)     # after the change's runs: alone again
    for judgement, part in zip(looks, spent):                        # the NPU core's share of every look
        npu = next(v for v in judgement.verdicts if v.label == NPU_CORE)
        assert (1.0 - npu.confidence) / 2 == pytest.approx(PRIMARY_SHARE * part)


def test_the_looks_at_an_upgrade_share_the_runs_alpha(results_url):
    with ResultsStore(results_url) as store:
        _store_with(store, _runs("old", 12, 1.0, 0))
        store.set_baseline(store.runs()[-1], "saved")
        looks = _judge_and_add(store, [replace(r, key=replace(r.key, versions=VERSIONS_NEW))
                                       for r in _runs("new", GROUP_RUNS + 1, 1.0, 100, noise_from=20)])
    assert {j.kind for j in looks} == {UPGRADE}
    assert [_spent(j) for j in looks[:GROUP_RUNS]] == pytest.approx([look_alpha(k) for k in range(1, GROUP_RUNS + 1)])
    assert _spent(looks[GROUP_RUNS]) == pytest.approx((1.0 - CONFIDENCE) / 2)


def _sequence_flagged(trials: int, look_of, history: int = 20) -> int:
    """A/A: how many of `trials` changes with nothing in them (`history` runs before, 5 after, 5 %
    log-normal noise, seeded) any of their 5 looks flags, look k judged at look_of(k)'s part of the
    run's alpha."""
    rows = np.exp(np.random.default_rng(17).normal(0.0, 0.05, (trials, history + GROUP_RUNS)))
    flagged = 0
    for row in rows:
        runs = [{STEP: float(x)} for x in row]
        flagged += any(any(v.regression for v in judge_values(runs[:history], runs[history:history + k],
                                                              runs[history + k], 10.0, look=look_of(k + 1)))
                       for k in range(GROUP_RUNS))
    return flagged


@pytest.mark.slow
def test_a_steady_change_is_flagged_by_any_of_its_looks_at_the_runs_alpha():
    # one figure, so each look's whole level goes to it. The looks' boundaries spend the alpha and no
    # more: 96 of 10,000 flagged, 0.96 % [0.78, 1.17] (judged at their parts alone, Bonferroni, 75:
    # 0.75 % [0.59, 0.94], a quarter of the alpha given away); every look judged as a lone run is (the
    # rule this replaces) is measurably over the alpha on the same trials. 10,000 trials, about 25 s.
    trials, alpha = 10000, 1.0 - CONFIDENCE
    flagged = _sequence_flagged(trials, lambda look: look)
    spent = stats.binomtest(flagged, trials).proportion_ci(0.95)
    assert spent.low < alpha < spent.high * 1.25, flagged
    every_look_alone = _sequence_flagged(trials, lambda look: None)
    assert stats.binomtest(every_look_alone, trials).proportion_ci(0.95).low > alpha, every_look_alone


def test_a_shift_of_the_whole_npu_fails_on_the_npu_core_and_names_every_branch(results_url):
    # each branch drifts on its own (2 %): their mean moves less than any one, so a +7 % shift of
    # every branch is clear on the NPU core while no branch alone is over its threshold
    def drifting(i):
        run = make_run(f"old{i}", 1.0, minute=i)
        noise = {b: float(np.exp(_NOISE[(i + 13 * k) % len(_NOISE)])) for k, b in enumerate(BRANCHES)}
        return replace(run, git_revision="r1", branches={b: v * noise[b] for b, v in run.branches.items()})

    with ResultsStore(results_url) as store:
        _store_with(store, [drifting(i) for i in range(12)])
        slower = replace(make_run("slow", 1.0, minute=200, branch_factor=dict.fromkeys(BRANCHES, 1.07)),
                         git_revision="r1")
        judged = judge_run(store, slower, 10.0)
    regressed = [v.label for v in judged.regressions]
    assert regressed[0] == NPU_CORE and not any(f"{b} core" in regressed for b in BRANCHES), judged.lines()
    assert 5 < judged.regressions[0].shift_pct < 9
    headline = judged.headline()
    for branch in BRANCHES:
        assert re.search(rf"; {branch} core \+\d+\.\d % \[-?[\d.]+, [\d.]+\]", headline), headline


def _with_host(runs, probe_s: float, load: float = 0.2, cpus: int = 2):
    return [replace(r, host_cpus=cpus, host_load=load,
                    host_probe_s=probe_s * float(np.exp(_NOISE[(i + 7) % len(_NOISE)] / 2)))
            for i, r in enumerate(runs)]


def test_a_run_on_a_slower_machine_is_not_comparable_rather_than_a_regression(results_url):
    history = _with_host(_runs("old", 12, 1.0, 0), 0.010)
    loaded = _with_host(_runs("new", 1, 1.4, 100), 0.016, load=2.5)[0]     # every figure 40 % slower
    with ResultsStore(results_url) as store:
        _store_with(store, history)
        judged = judge_run(store, loaded, 10.0)
        assert store.runs()[0].host_probe_s == history[0].host_probe_s     # the condition is stored
    assert judged.kind == NOT_COMPARABLE and not judged.regressed, judged.lines()
    assert judged.headline().startswith("not comparable: calibration probe +")
    assert "ran slower" in judged.headline() and "load 2.50 per CPU" in judged.headline()
    assert judged.condition is not None and judged.condition.shift_pct > 30


def test_a_real_slowdown_at_the_same_condition_still_fails(results_url):
    history = _with_host(_runs("old", 12, 1.0, 0), 0.010)
    slower = _with_host(_runs("new", 1, 1.4, 100), 0.010)[0]
    with ResultsStore(results_url) as store:
        _store_with(store, history)
        judged = judge_run(store, slower, 10.0)
    assert judged.kind == HISTORY and judged.regressed, judged.lines()
    assert judged.condition is not None and not judged.condition.regression


def test_another_cpu_count_is_not_comparable(results_url):
    history = _with_host(_runs("old", 12, 1.0, 0), 0.010, cpus=8)
    run = _with_host(_runs("new", 1, 1.0, 100), 0.010, cpus=2)[0]
    with ResultsStore(results_url) as store:
        _store_with(store, history)
        judged = judge_run(store, run, 10.0)
    assert judged.kind == NOT_COMPARABLE and "the history ran on [8] CPUs, this run on 2" in judged.headline()


GIB = 2 ** 30


@pytest.mark.parametrize("reported, comparable", [(15.6, False), (7.8, True)])
def test_another_memory_size_is_not_comparable_and_a_few_mib_less_is_the_same_size(results_url, reported,
                                                                                   comparable):
    # the history on an 8 GB board reporting 7.7 GiB; the run on a 16 GB one, or on another 8 GB one
    history = [replace(r, host_memory_bytes=int(7.7 * GIB)) for r in _with_host(_runs("old", 12, 1.0, 0), 0.010)]
    run = replace(_with_host(_runs("new", 1, 1.0, 100), 0.010)[0], host_memory_bytes=int(reported * GIB))
    with ResultsStore(results_url) as store:
        _store_with(store, history)
        assert store.runs()[0].host_memory_bytes == int(7.7 * GIB)             # the memory is stored
        judged = judge_run(store, run, 10.0)
    if comparable:
        assert judged.kind == HISTORY and not judged.regressed, judged.lines()
    else:
        assert judged.kind == NOT_COMPARABLE and not judged.regressed, judged.lines()
        assert "the history ran with 8 GiB of memory, this run with 16 GiB" in judged.headline(), judged.headline()


def test_a_host_condition_that_cannot_be_is_refused():
    with pytest.raises(ResultsError, match="host_probe_s"):
        replace(make_run("x"), host_probe_s=0.0)
    with pytest.raises(ResultsError, match="host_cpus"):
        replace(make_run("x"), host_cpus=0)
    with pytest.raises(ResultsError, match="host_memory_bytes must be a whole number of bytes"):
        replace(make_run("x"), host_memory_bytes=0)


def test_host_condition_measures_this_machine():
    with HostCondition() as host:
        pass
    assert host.cpus >= 1 and host.probe_s > 0
    # the kernel's own figure (psutil reads it from /proc/meminfo, in kB)
    mem_total = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    assert host.memory_bytes == int(mem_total.split()[1]) * 1024
    assert host.load_per_cpu is None or host.load_per_cpu >= 0
    assert probe_seconds(repeats=1) > 0
