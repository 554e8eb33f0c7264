"""The benchmark baselines' rules, shown by running the benchmark gate itself under pytester:
an empty store passes with "no baseline yet", a run marked INVALID is never saved, a different key is
reported and not passed as a regression check, and a regression fails the benchmark test in JUnit
naming the baseline, the delta in percent and the threshold.

Runs are one sampler step on the embedded model. The regression is the faults backend with every
load, init and run stretched to 4x its own time (`slow=x4`) against its own unslowed baseline: ~+300 %,
so no load on this machine can hide it within the 10 % threshold.
"""
import json
import shutil
import xml.etree.ElementTree as ET

import pytest

from harness.model.config import REPO_ROOT

pytestmark = pytest.mark.slow       # ~10 s per gate session on the 2-core CI machine

BOARD_TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"


@pytest.fixture(scope="module")
def partition_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("partition-cache")     # one export shared by every run below


@pytest.fixture
def gate(pytester, tmp_path, partition_cache):
    def run(*args):
        return pytester.runpytest(
            "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider",
            str(REPO_ROOT / "tests/acceptance/test_benchmark.py"), "--bench-steps=1", "--cases=seven",
            f"--artifacts={tmp_path / 'artifacts'}", f"--history={tmp_path / 'history.jsonl'}",
            f"--cache-dir={partition_cache}", f"--baselines={tmp_path / 'baselines'}",
            f"--junitxml={tmp_path / 'junit.xml'}", "-rs", *args)
    return run


def saved(tmp_path) -> list:
    return sorted((tmp_path / "baselines").rglob("*.json"))


def junit_case(tmp_path) -> ET.Element:
    return ET.parse(tmp_path / "junit.xml").getroot().find(".//testcase")


def test_empty_store_passes_with_no_baseline_yet(gate, tmp_path):
    result = gate()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*no baseline yet for seven on board *"])
    assert saved(tmp_path) == [], "no baseline without --save-baseline"
    assert json.loads((tmp_path / "history.jsonl").read_text())["steps"] == 1


def test_invalid_run_is_not_saved_and_a_valid_one_is(gate, tmp_path):
    tree = tmp_path / "board"
    shutil.copytree(BOARD_TREE, tree)
    valid = gate("--backend=onnxruntime", f"--telemetry-root={tree}", "--save-baseline")
    valid.assert_outcomes(passed=1)
    assert len(saved(tmp_path)) == 1
    shutil.rmtree(tmp_path / "baselines")
    # soc-thermal at its 85 C passive trip point: the board throttles, the timing is INVALID.
    (tree / "sys/class/thermal/thermal_zone0/temp").write_text("86000\n")
    invalid = gate("--backend=onnxruntime", f"--telemetry-root={tree}", "--save-baseline")
    invalid.assert_outcomes(passed=1)
    invalid.stdout.fnmatch_lines(["*baseline not saved: the run is INVALID (thermal_zone0 (soc-thermal) "
                                  "reached its passive trip point 85 C*"])
    assert saved(tmp_path) == []
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["valid"] for r in history] == [True, False]


def test_key_mismatch_is_reported_not_passed_as_a_regression_check(gate, tmp_path):
    gate("--save-baseline").assert_outcomes(passed=1)
    result = gate("--precision=float32")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*not a regression check: the baseline * has another key "
                                 "(precision float16 -> float32; manifest_hash * -> *)*"])
    skipped = junit_case(tmp_path).find("skipped")
    assert skipped is not None and "precision float16 -> float32" in skipped.get("message")


def test_regression_fails_the_benchmark_test_in_junit(gate, tmp_path):
    gate("--backend=faults", "--save-baseline").assert_outcomes(passed=1)
    [baseline] = saved(tmp_path)
    before = baseline.read_bytes()
    result = gate("--backend=faults", "--fault=slow=x4", "--baseline-threshold=10%", "--save-baseline")
    result.assert_outcomes(failed=1)
    failure = junit_case(tmp_path).find("failure")
    assert failure is not None
    message = failure.get("message")
    assert "benchmark regression" in message and str(baseline) in message
    assert "over the 10 % threshold" in message
    delta = float(message.split("): +")[1].split(" %")[0])
    assert delta > 10
    assert baseline.read_bytes() == before, "a failed session never replaces the baseline"
    result.stdout.fnmatch_lines(["*baseline not saved: the session did not pass (1 failed*"])


def test_pytest_benchmarks_own_failing_is_refused(gate):
    result = gate("--benchmark-compare-fail=mean:10%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--benchmark-compare-fail is refused by the suite's baseline rules: "
                                 "use --baseline-threshold=PERCENT*"])


def test_pytest_benchmarks_archive_is_not_a_baseline(gate, tmp_path):
    # --benchmark-autosave still archives the run (pytest-benchmark's storage), but it makes no baseline.
    gate("--benchmark-autosave", f"--benchmark-storage=file://{tmp_path / 'archive'}").assert_outcomes(passed=1)
    assert list((tmp_path / "archive").rglob("0001_*.json")) and saved(tmp_path) == []
    gate().stdout.fnmatch_lines(["*no baseline yet for seven*"])
