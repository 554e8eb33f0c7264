"""Infrastructure failures are errors, gate failures are failures (docs/gates.md, section 'Infrastructure
errors and gate failures'), proven by running the suite itself (pytest in a subprocess, as
test_gates_can_fail.py) on the faults backend:

- one session, two golden cases on the INT8-FFN what-if (which fails the quality gate): the first case's
  run is judged and fails SSIM; the driver then fails every init (`init-fails-after`, as rknn_init fails
  with "Bad address" after some hundred reloads), so the second case's run ends in setup. One failure and
  one error, apart in the terminal, the JUnit XML, summary.md and the LAVA results;
- a run stuck in the driver (`hang@5`) stopped by --npu-timeout: an error naming the hung call, and the
  other gates of the same case are not made to wait for it again.
"""
import json
import xml.etree.ElementTree as ET

import pytest

from harness.gates.cases import golden_dir_for, load_cases
from harness.lab.results import lava_commands
from harness.model.config import EMBEDDED_DIR, REPO_ROOT, load_model_dir

pytestmark = pytest.mark.slow


@pytest.fixture
def run_suite(pytester, suite, monkeypatch):
    """The suite's gates in a fresh pytest process, the partitions from this session's cache."""
    monkeypatch.setenv("COLUMNS", "400")

    def run(*args):
        args = [str(REPO_ROOT / a) if a.startswith("tests/") else a for a in args]
        return pytester.runpytest_subprocess(
            "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider",
            "-p", "no:randomly", "-q", "-rfE", f"--artifacts={pytester.path / 'artifacts'}",
            f"--results=sqlite:///{pytester.path / 'results.sqlite'}", f"--cache-dir={suite.cache_dir}",
            f"--junitxml={pytester.path / 'artifacts' / 'junit.xml'}", *args,
            timeout=600)
    return run


def _junit(path) -> dict[str, set[str]]:
    """{test case name: the outcome elements it holds (failure, error, skipped)}."""
    return {case.get("name"): {e.tag for e in case if e.tag in ("failure", "error", "skipped")}
            for case in ET.parse(path).getroot().iter("testcase")}


def _inits_of_one_run(case_name: str) -> int:
    """Inits of one on-demand run of the case: every subgraph at every step, then the decoder once."""
    cfg = load_model_dir(EMBEDDED_DIR)
    case = next(c for c in load_cases(golden_dir_for(cfg.name) / "cases.toml") if c.name == case_name)
    return cfg.subgraphs * case.steps + 1


def test_a_driver_error_is_an_error_and_a_failed_gate_a_failure_everywhere(run_suite, pytester):
    # The driver fails from the fourth step of the second case's run on.
    after = _inits_of_one_run("seven") + 3 * load_model_dir(EMBEDDED_DIR).subgraphs
    result = run_suite("tests/acceptance/test_quality.py", "--cases=seven,three", "--backend=faults",
                       "--fake-quant=w8a8-ffn", f"--fault=init-fails-after={after}")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["FAILED *test_matches_golden?seven? - AssertionError: seven: *fails SSIM >= *",
                                 "ERROR *test_matches_golden?three? - Failed: three: the run failed before any gate "
                                 "could judge it: faults: subgraph * init failed: *Bad address*"])
    artifacts = pytester.path / "artifacts"
    assert _junit(pytester.path / "artifacts" / "junit.xml") == {"test_matches_golden[seven]": {"failure"},
                                               "test_matches_golden[three]": {"error"}}
    summary = (artifacts / "summary.md").read_text()
    assert "FAILED: 0 passed, 1 failed, 1 error(s) (infrastructure, not judged), 0 skipped" in summary
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in summary.splitlines()
            if line.startswith("| `tests/")}
    assert rows == {"tests/acceptance/test_quality.py::test_matches_golden[seven]": "❌ failed",
                    "tests/acceptance/test_quality.py::test_matches_golden[three]": "⚠️ error"}, rows
    assert "three: the run failed before any gate could judge it" in summary
    lava = {c.split()[1]: c.split()[3] for c in lava_commands(artifacts) if c.startswith("lava-test-case")}
    assert lava["test_matches_golden_seven"] == "fail" and lava["test_matches_golden_three"] == "unknown", lava
    session = json.loads((artifacts / "session.json").read_text())
    assert session["tests"] == {"failed": 1, "error": 1} and session["exit_code"] == 1


def test_a_hung_npu_call_is_an_error_and_not_waited_for_twice(run_suite, pytester):
    result = run_suite("tests/acceptance/test_numerics.py", "tests/acceptance/test_quality.py", "--cases=seven",
                       "--backend=faults", "--fault=hang@5", "--npu-timeout=5")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        "ERROR *test_numerics.py::*seven? - Failed: seven: its run did not end within --npu-timeout 5 s "
        "(a hung NPU call; *",
        "ERROR *test_quality.py::*seven? - Failed: seven: not run again: its run did not end within*"])
    assert set(map(frozenset, _junit(pytester.path / "artifacts" / "junit.xml").values())) == {frozenset({"error"})}
