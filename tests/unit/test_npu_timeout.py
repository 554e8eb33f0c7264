"""--npu-timeout (board profile: npu_timeout) puts a pytest-timeout limit on every npu test: a hung NPU
call fails its own test, and the session goes on to the next one and to its summary."""
import pytest

from harness.model.config import REPO_ROOT

HUNG = """
import time
import pytest

@pytest.mark.npu
def test_hung_npu_call():
    time.sleep(30)          # stands in for an inference that never returns

@pytest.mark.npu
def test_next_gate():
    pass

def test_not_an_npu_test():
    time.sleep(2)
"""


def run(pytester, *args):
    pytester.makepyfile(test_hung=HUNG)
    return pytester.runpytest("-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={pytester.path}",
                              "-p", "no:cacheprovider", "test_hung.py",
                              f"--artifacts={pytester.path / 'artifacts'}", "--cases=seven",
                              # the checkout's partition cache: the summary names the partition, else
                              # exported into the pytester folder at the session's end (~1.5 s of CPU)
                              f"--cache-dir={REPO_ROOT / '.cache'}", *args)


def test_a_hung_npu_test_fails_on_its_timeout_and_the_session_goes_on(pytester):
    result = run(pytester, "--npu-timeout=1")
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(["*Timeout (>1.0s)*"])
    assert (pytester.path / "artifacts" / "summary.md").read_text().count("❌ failed") == 1


def test_bad_timeout_value_is_one_line(pytester):
    result = run(pytester, "--npu-timeout=soon")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*npu-timeout expects a positive whole number, got 'soon'*"])
