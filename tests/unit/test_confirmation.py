"""A regression judged from one run fails only when a second run confirms it (judge.confirm): one run
disturbed far past its history is cleared by the next, a real slowdown is confirmed, and a group's
verdict needs no second run. The store is real (SQLite and PostgreSQL through `results_url`); the
runs are built the way the benchmark gate builds them (tests/results_data.py)."""
from dataclasses import replace

import numpy as np
import pytest

from harness.model.config import BRANCHES
from harness.results.records import ResultsError
from harness.results.store import ResultsStore
from harness.results.verdict.judging import confirm, judge_run
from harness.results.verdict.verdict import HISTORY
from tests.results_data import VERSIONS_NEW, make_run

pytestmark = pytest.mark.results

_NOISE = np.random.default_rng(5).normal(0, 0.02, 60)      # 2 % log-noise run to run, fixed


def _run(name: str, i: int, revision: str = "r1", factor: float = 1.0, **kw):
    run = make_run(name, float(np.exp(_NOISE[i % len(_NOISE)])), minute=i, **kw)
    noisy = {b: run.branches[b] * float(np.exp(_NOISE[(i + 7 * k) % len(_NOISE)] / 2)) for k, b in enumerate(BRANCHES)}
    slowed = {b: v * (factor if b == "ffn" else 1.0) for b, v in noisy.items()}
    return replace(run, git_revision=revision, branches=slowed,
                   mean_step_s=run.mean_step_s + sum(slowed.values()) - sum(run.branches.values()))


def _history(store, count: int = 15):
    for i in range(count):
        store.add_run(_run(f"old{i}", i))


def test_one_disturbed_run_is_cleared_by_the_next_and_a_slower_ffn_is_confirmed(results_url):
    with ResultsStore(results_url) as store:
        _history(store)
        disturbed = _run("new0", 100, revision="r2", factor=2.0)       # one run's ffn twice as slow
        first = judge_run(store, disturbed, 10.0)
        assert first.kind == HISTORY and first.regressions and first.needs_confirmation, first.lines()
        assert first.regressed, "until a second run is judged the first run's regression stands"
        cleared = confirm(store, disturbed, first, _run("new1", 101, revision="r2"), 10.0)
        confirmed = confirm(store, disturbed, first, _run("new1", 101, revision="r2", factor=2.0), 10.0)
    assert not cleared.regressed, cleared.lines()
    assert "not confirmed by a second run (" in cleared.headline() and cleared.regressions
    assert confirmed.regressed and "; confirmed by a second run: " in confirmed.headline(), confirmed.lines()
    assert any(v.label == "ffn core" for v in confirmed.regressions), "the branch is named"
    alone, after = cleared.confirmation
    assert all(v.runs == 1 for v in alone.verdicts), "the second run against the first one's history"
    assert {v.runs for v in after.verdicts} == {2}, "and as the change's next look, the first run in its group"
    assert any(line.startswith("  second run, as the change's next look: ") for line in cleared.lines())


def test_a_second_run_on_a_slower_machine_clears_nothing(results_url):
    def on_host(run, probe_s):
        return replace(run, host_cpus=2, host_load=0.1, host_probe_s=probe_s)

    with ResultsStore(results_url) as store:
        for i in range(15):
            store.add_run(on_host(_run(f"old{i}", i), 0.010 * float(np.exp(_NOISE[i] / 4))))
        disturbed = on_host(_run("new0", 100, revision="r2", factor=2.0), 0.010)
        first = judge_run(store, disturbed, 10.0)
        slower_host = on_host(_run("new1", 101, revision="r2"), 0.016)      # the probe 60 % slower
        judged = confirm(store, disturbed, first, slower_host, 10.0)
    assert first.needs_confirmation and {c.kind for c in judged.confirmation} == {"not comparable"}
    assert judged.regressed, "a second run that says nothing leaves the first run's regression standing"
    assert "; a second run could neither confirm nor clear it (not comparable: " in judged.headline()


def test_a_groups_regression_needs_no_second_run(results_url):
    with ResultsStore(results_url) as store:
        _history(store)
        for i in range(2):
            store.add_run(_run(f"new{i}", 100 + i, revision="r2", factor=1.5))
        third = judge_run(store, _run("new2", 102, revision="r2", factor=1.5), 10.0)
    assert third.regressed and not third.needs_confirmation, third.lines()
    assert third.regressions[0].runs == 3


def test_the_second_runs_next_look_is_its_judgement_once_the_first_run_is_written(results_url):
    with ResultsStore(results_url) as store:
        _history(store)
        disturbed, second = _run("new0", 100, revision="r2", factor=2.0), _run("new1", 101, revision="r2")
        first = judge_run(store, disturbed, 10.0)
        _, after = confirm(store, disturbed, first, second, 10.0).confirmation
        assert not store.has_run("new0", "cat"), "the first run is not left in the store"
        store.add_run(disturbed)
        written = judge_run(store, second, 10.0)
    assert after.kind == HISTORY and after.verdicts and after == written


def _ids(runs):
    return [r.run_id for r in runs]


def test_the_store_read_with_pending_runs_answers_as_it_will_once_they_are_written(results_url):
    runs = [_run(f"r{i}", i, board=("rock-5c-aaaa", "rock-5c-bbbb")[i % 2], valid=i % 5 != 3,
                 versions=VERSIONS_NEW if i % 3 == 0 else None, case=("cat", "seven")[i % 4 == 1])
            for i in range(24)]
    runs = [replace(r, host_cpus=(None, 2, 4)[i % 3]) for i, r in enumerate(runs)]
    key, experiment = runs[1].key.digest, runs[1].key.experiment
    filters = [{}, {"board": "rock-5c-aaaa"}, {"valid": True}, {"key": key}, {"experiment": experiment},
               {"case": "seven"}, {"cpus": 2}, {"other_than_board": "rock-5c-aaaa", "board_model": "Radxa ROCK 5C"},
               {"key": key, "valid": True, "latest": 4}, {"experiment": experiment, "cpus": 4, "latest": 3},
               {"run_id": "r20"}, {"backend": "board-sim", "latest": 30}]

    def answers(source):
        return ([_ids(source.runs(**f)) for f in filters],
                [source.stacks(board, experiment) for board in ("rock-5c-aaaa", "rock-5c-bbbb")])

    with ResultsStore(results_url) as store, ResultsStore(results_url) as other:
        for run in runs[:16]:
            store.add_run(run)
        stored = answers(store)
        with store.pending(runs[16:]) as view:
            seen = answers(view)
            assert _ids(other.runs()) == _ids(runs[:16]), "another connection does not see the pending runs"
        assert answers(store) == stored, "nothing of the pending runs remains"
        for run in runs[16:]:
            store.add_run(run)
        written = answers(store)
    assert seen == written
    assert any(ids and ids[-1] in _ids(runs[16:]) for ids in seen[0]), "the pending runs were asked about"


def test_pending_runs_leave_no_trace_when_the_block_raises_or_writes(results_url):
    with ResultsStore(results_url) as store:
        _history(store, 3)
        stored, experiment = _ids(store.runs()), _run("new0", 100).key.experiment
        with pytest.raises(ResultsError, match="no run 'missing'"):
            with store.pending([_run("new0", 100)]) as view:
                assert view.has_run("new0", "cat")
                view.run("missing")
        with store.pending([_run("new0", 100)]) as view:
            view.add_run(_run("new1", 101), baseline="saved")       # a SAVEPOINT in the view's transaction
            assert _ids(view.runs())[-2:] == ["new0", "new1"] and view.baseline("rock-5c-aaaa", experiment)
        assert _ids(store.runs()) == stored and store.baseline("rock-5c-aaaa", experiment) is None
        store.add_run(_run("new0", 100))        # the ids the pending runs held are free


def test_a_pending_run_that_is_stored_already_is_one_line(results_url):
    with ResultsStore(results_url) as store:
        _history(store, 3)
        with pytest.raises(ResultsError, match=r"^results store .*: a run judged as not yet written is stored "
                                               r"already \(.*\)$"):
            with store.pending([_run("old1", 1)]):
                pass
        assert _ids(store.runs()) == ["old0", "old1", "old2"]
