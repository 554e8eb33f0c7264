"""A new stack stays on probation until it is accepted, and the figure that moved is in the headline.

Through the real judge on a real store (SQLite and PostgreSQL through `results_url`), runs built the
way the benchmark gate builds them (tests/results_data.py): every run of a new NPU stack or manifest is
an upgrade comparison against the board's accepted stack (its baseline's, or the stack of its history
before the change), never "no verdict yet", until --accept-upgrade or a saved baseline moves it; a
branch that fails while the step does not is named in the headline and in the run summary's row.
"""
from dataclasses import replace

import numpy as np
import pytest

from harness.gates.benchmark import comparison_of
from harness.model.config import BRANCHES
from harness.report.summary import markdown_summary
from harness.results.store import ResultsStore
from harness.results.verdict.judging import confirm, judge_run
from harness.results.verdict.verdict import HISTORY, UPGRADE
from tests.results_data import VERSIONS_NEW, make_run

pytestmark = pytest.mark.results


def _noisy(name: str, i: int, rng, *, ffn: float = 1.0, sigma: float = 0.025, step_s: float = 1.0, **kw):
    """A run whose every branch has its own log-normal noise `sigma` (ffn slower by `ffn`); the step
    and the run stage are the sum of what changed."""
    run = make_run(name, step_s, minute=i, **kw)
    branches = {b: v * float(np.exp(rng.normal(0, sigma))) * (ffn if b == "ffn" else 1.0)
                for b, v in run.branches.items()}
    added = sum(branches.values()) - sum(run.branches.values())
    return replace(run, branches=branches, stages={**run.stages, "run": sum(branches.values())},
                   mean_step_s=run.mean_step_s + added, total_denoise_s=(run.mean_step_s + added) * run.key.steps)


def test_every_run_of_a_new_stack_is_an_upgrade_verdict_until_it_is_accepted(results_url):
    rng = np.random.default_rng(3)
    with ResultsStore(results_url) as store:
        for i in range(3):          # three runs of the old stack, no baseline saved
            store.add_run(_noisy(f"old{i}", i, rng))
        judged = []
        for k in range(7):          # the new stack three times slower, run after run
            run = _noisy(f"new{k}", 10 + k, rng, step_s=3.0, versions=VERSIONS_NEW)
            judged.append(judge_run(store, run, 10.0))
            if k == 0:              # the gate confirms a one-run regression; the second run is run 2
                second = _noisy("new0-confirm", 10, rng, step_s=3.0, versions=VERSIONS_NEW)
                _, confirming = confirm(store, run, judged[0], second, 10.0).confirmation
            store.add_run(run)
        for number, judgement in enumerate(judged, start=1):
            assert judgement.kind == UPGRADE and judgement.regressed, judgement.lines()
            assert judgement.probation == number
            assert judgement.headline().startswith(f"upgrade under probation, run {number} of the new stack, "
                                                   "against 3 valid run(s) of the accepted stack"), judgement.headline()
            assert "denoise step +" in judgement.headline() and "runtime_lib 2.3.2 -> 2.5.0" in judgement.headline()
        assert [v.runs for v in judged[2].regressions][:1] == [3], "the new stack's runs are judged as a group"
        # a confirming run belongs to the session of the run it confirms: not a run of the probation
        assert confirming.probation == 1 and confirming.regressed, confirming.headline()
        # accepted: the new stack's history is the reference from now on
        store.set_baseline(store.runs()[-1], "upgrade accepted")
        after = judge_run(store, _noisy("new7", 30, rng, step_s=3.0, versions=VERSIONS_NEW), 10.0)
    assert after.kind == HISTORY and after.probation is None and not after.regressed, after.lines()


def test_a_later_stack_is_judged_against_the_accepted_one_not_the_one_on_probation(results_url):
    rng = np.random.default_rng(4)
    with ResultsStore(results_url) as store:
        for i in range(12):
            store.add_run(_noisy(f"a{i}", i, rng))
        judged = []
        for k in range(3):          # a new stack as fast as the old: passes, judged as a growing group
            judged.append(judge_run(store, run := _noisy(f"b{k}", 20 + k, rng, versions=VERSIONS_NEW), 10.0))
            store.add_run(run)
        # a new manifest on top, 20 % slower: against the accepted stack's 12 runs, not the 3 on probation
        later = judge_run(store, _noisy("c0", 30, rng, step_s=1.2, versions=VERSIONS_NEW, manifest_hash="m2"), 10.0)
    assert later.kind == UPGRADE and later.regressed and later.probation == 1, later.lines()
    assert "12 valid run(s) of the accepted stack" in later.reference
    assert later.reference_run.key.versions != VERSIONS_NEW and "manifest_hash m1 -> m2" in later.differences
    for k, judgement in enumerate(judged):
        assert judgement.kind == UPGRADE and not judgement.regressed, judgement.lines()
        assert judgement.probation == k + 1 and {v.runs for v in judgement.verdicts} == {k + 1}


def test_a_branch_that_fails_while_the_step_does_not_is_named_in_the_headline_and_the_summary_row(results_url):
    # a saved baseline and its history, 2.5 % noise per branch; then ffn 8 % slower, the others unchanged
    rng = np.random.default_rng(3)
    with ResultsStore(results_url) as store:
        for i in range(12):
            store.add_run(_noisy(f"h{i}", i, rng), baseline="saved" if i == 0 else None)
        for k in range(5):          # the runs of a new revision, judged as a group look by look
            run = replace(_noisy(f"n{k}", 20 + k, rng, ffn=1.08), git_revision="r2")
            judgement = judge_run(store, run, 10.0)
            if judgement.regressions:
                break
            store.add_run(run)
    assert [v.label for v in judgement.regressions] == ["ffn core"], judgement.lines()
    step, ffn = (next(v for v in judgement.verdicts if v.label == label) for label in ("denoise step", "ffn core"))
    assert not step.regression
    assert f"ffn core {ffn.shift_pct:+.1f} % [" in judgement.headline() and 5 < ffn.shift_pct < 11
    row = comparison_of(run, judgement)
    summary = markdown_summary({"outcome": "failed", "counts": {"failed": 1}, "tests": [],
                                "benchmarks": [{"case": "cat", "valid": True, "reasons": [], "comparison": row}]})
    table_row = next(line for line in summary.splitlines() if line.startswith("| cat |"))
    assert f"regressed: ffn core {ffn.shift_pct:+.1f} %" in table_row, table_row
    print(judgement.headline())
    print(table_row)


def test_a_branch_over_the_fixed_rule_is_named_in_the_headline_though_the_step_decides(results_url):
    # one saved run: the fixed rule, which fails a run on its step alone (a 0.4 ms branch moves 30 %
    # between identical runs on a busy host); a branch over its threshold is named all the same
    with ResultsStore(results_url) as store:
        store.add_run(make_run("base"), baseline="saved")
        judgement = judge_run(store, make_run("new", minute=5, branch_factor={"ffn": 1.25}), 10.0)
    assert not judgement.regressed and {v.kind for v in judgement.verdicts} == {"fixed"}, judgement.lines()
    assert "; ffn core +25.0 % over the 10 % threshold, not failed: the fixed rule fails a run on its step alone" \
        in judgement.headline(), judgement.headline()
    assert all(b not in judgement.headline() for b in BRANCHES if b != "ffn")
