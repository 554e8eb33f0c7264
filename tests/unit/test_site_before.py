"""The results site judges its runs in memory (harness/site/before.py), and shows the verdict the gate
gives: every sampled stored run's verdict is judge_stored's on the real store (as_before), and the
site's reading of the store does not grow with its runs."""
from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from harness.results.constants import GROUP_RUNS
from harness.results.store import ResultsStore
from harness.results.verdict.judging import judge_stored
from harness.results.verdict.verdict import FIRST, HISTORY, NOT_COMPARABLE, UPGRADE
from harness.site.collect import collect, judged_as_written
from tests.results_data import VERSIONS_NEW, VERSIONS_OLD, make_run
from tests.site_data import BOARDS, CASES, RUNS, UPGRADE_AT, lab_store, run_name

pytestmark = pytest.mark.results

NEW_BOARD = "rock-5c-dddd"      # no baseline of its own: judged against the fleet's


def _store(url: str) -> None:
    """The site's lab store and what a lab adds to it: a new board whose runs were spooled and pushed
    late (written after every other run, their times among them), two of them on 4 CPUs; a confirming
    run; an upgrade accepted on one series after the fact (its baseline replaced, saved last)."""
    lab_store(url)
    with ResultsStore(url) as store:
        for i in range(14):
            run = make_run(f"dddd-cat-{i:02d}", 1.0 + 0.001 * (i % 3), board=NEW_BOARD,
                           versions=VERSIONS_NEW if i >= 10 else VERSIONS_OLD, minute=60 * (i + 18) + 30)
            store.add_run(replace(run, host_cpus=4 if i in (6, 12) else 8))
        board, case = BOARDS[0], CASES[0]
        confirm = make_run(f"{run_name(board, case, RUNS - 1)}-confirm", 1.0, board=board, case=case,
                           versions=VERSIONS_NEW, minute=60 * RUNS)
        store.add_run(confirm)
        accepted = store.runs(board=BOARDS[1], case=CASES[1], latest=RUNS - UPGRADE_AT - 2)[0]
        store.set_baseline(accepted, "accepted")


def _sample(runs) -> list:
    """Every run of the late board, each series' latest run and its upgrade's looks, and every 12th."""
    looks = {run_name(b, c, i) for b in BOARDS for c in CASES for i in range(UPGRADE_AT, UPGRADE_AT + GROUP_RUNS)}
    latest = {(r.board_id, r.key.experiment): r for r in runs}
    return [r for n, r in enumerate(runs) if r.board_id == NEW_BOARD or r.run_id in looks or n % 12 == 0
            or latest[(r.board_id, r.key.experiment)] is r]


@pytest.mark.slow       # ~4 s of CPU: judge_stored rolls back a transaction per run
def test_the_site_judges_every_sampled_run_as_judge_stored_does(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    _store(url)
    with ResultsStore(url, create=False) as store:
        runs = store.runs(whole=False)          # what the site reads
        sample = _sample(runs)
        shown = judged_as_written(store, runs, sample, 10.0)
        whole = {(r.run_id, r.key.case): r for r in store.runs()}
        gate = {id(r): judge_stored(store, whole[(r.run_id, r.key.case)], 10.0) for r in sample}
    kinds = {v.kind for v in gate.values()}
    assert {HISTORY, UPGRADE, FIRST, NOT_COMPARABLE} <= kinds, kinds       # every kind of reference
    assert any("the fleet's baseline" in v.reference for v in gate.values()), "the late board: against the fleet's"
    assert len(sample) > 50
    differ = [(r.run_id, shown[id(r)], gate[id(r)]) for r in sample if shown[id(r)] != gate[id(r)]]
    assert not differ, differ[:2]


def _queries(store: ResultsStore) -> int:
    """The SQL statements collect(store) sends, to the store or to any database of its own."""
    sent = []
    listener = lambda *args: sent.append(args[2])      # noqa: E731 (before_cursor_execute's statement)
    event.listen(Engine, "before_cursor_execute", listener)
    try:
        collect(store)
    finally:
        event.remove(Engine, "before_cursor_execute", listener)
    return len(sent)


@pytest.mark.slow       # two sites collected: ~3 s of CPU
def test_the_site_reads_the_store_in_as_many_queries_whatever_its_runs(tmp_path):
    # what keeps a lab's 10,000 runs to seconds (docs/measurements.md): the runs read once, each
    # judgement in memory, a query per verdict's reference run, none per run of the store
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    lab_store(url)
    with ResultsStore(url, create=False) as store:
        before = _queries(store)
        for board in BOARDS:
            for case in CASES:
                for i in range(RUNS, RUNS + 30):
                    store.add_run(make_run(run_name(board, case, i), 1.5 if case == CASES[1] else 1.0,
                                           board=board, case=case, versions=VERSIONS_NEW, minute=60 * i))
        assert len(store.runs(whole=False)) == (RUNS + 30) * len(BOARDS) * len(CASES)
        assert _queries(store) == before, "collect's queries grew with the store's runs"
        assert before < 100, before
