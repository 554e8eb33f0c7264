"""The --ab-a gate, run under pytester as CI runs it: a side B slowed on purpose (the faults
backend's slow=x4, B's only) fails the benchmark test with the verdict line naming the figure, its
shift, interval and threshold; the same partition against itself passes.
Either way the session reaches the results store, both sides keyed by their own partition.
"""
import pytest

from harness.model.config import REPO_ROOT
from harness.partition.manifest import manifest_sha256
from harness.results.store import ResultsStore

pytestmark = pytest.mark.slow       # two gate sessions of 1 + 8 rounds each


@pytest.fixture
def gate(pytester, tmp_path, a_partition):
    def run(*args):
        return pytester.runpytest(
            "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider",
            str(REPO_ROOT / "tests/acceptance/test_benchmark_ab.py"), "--bench-steps=1", "--cases=seven",
            f"--artifacts={tmp_path / 'artifacts'}", f"--cache-dir={tmp_path / 'cache'}",
            f"--ab-a={a_partition}", "--ab-rounds=8", "--backend=faults",
            f"--results=sqlite:///{tmp_path / 'results.sqlite'}", *args)
    return run


def stored_session(tmp_path):
    with ResultsStore(f"sqlite:///{tmp_path / 'results.sqlite'}") as store:
        (session,) = store.ab_sessions()
        return session, store.runs()


def test_a_slowed_b_fails_with_the_verdict_line(gate, tmp_path, a_partition):
    result = gate("--fault=slow=x4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*A/B regression against *init +* % [[]*, *] over the 2 % threshold*"])
    session, runs = stored_session(tmp_path)
    assert session.regression and session.case == "seven" and len(session.pairs) == 8
    assert session.a_partition == str(a_partition) and session.b_options == {"slowdown": 4.0}
    assert session.a.key.manifest_hash == manifest_sha256(a_partition)
    # the suite's own export of the same model is another folder with the same manifest: one key
    assert session.b_partition != session.a_partition and session.b.key == session.a.key
    assert {r.run_id for r in runs} == {session.a.run_id, session.b.run_id}


def test_an_unchanged_b_passes(gate, tmp_path, a_partition):
    # The same files on both sides: two copies of one partition differ in their load stage by a few
    # per cent here (where each copy's pages sit), which is a difference, and the session says so.
    # Judged at 99.99 %: at the default 99 % an unchanged B fails 1 % of sessions by design.
    # At 99.99 % over 8 one-step pairs the session's own power is low on a busy host (a step interval
    # of [-88, 737] % under load 10 here: INCONCLUSIVE, issue 41); what this test holds is that an
    # unchanged B is never called a regression, so the lab's --inconclusive=warn lets it pass.
    gate(f"--partition={a_partition}", "--ab-confidence=99.99%", "--inconclusive=warn").assert_outcomes(passed=1)
    assert (tmp_path / "artifacts" / "runs" / "seven-ab.json").exists()
    session, _ = stored_session(tmp_path)
    assert not session.regression and session.b.key == session.a.key
    assert session.confidence == 0.9999
