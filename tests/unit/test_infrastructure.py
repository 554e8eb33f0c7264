"""Infrastructure failures apart from gate verdicts, unit by unit: the faults that stand for a failing
driver, which run errors are a gate's verdict, and the summary's and LAVA's words for an error
(tests/acceptance/test_infrastructure_errors.py runs them through the suite)."""
from __future__ import annotations

import shlex

import pytest

from harness.backends.base import BackendOptions
from harness.backends.faults import FaultInjectionContext, parse_fault
from harness.core.errors import BackendError, ConfigError, ManifestError, MemoryGuardTripped, NumericsError
from harness.gates.runner import is_verdict
from harness.lab.results import lava_commands
from harness.report.summary import markdown_summary
from tests.helpers import pytest_artifacts


def test_the_infrastructure_faults_parse_and_a_bad_one_is_named():
    assert parse_fault("hang@5,init-fails-after=225") == {"hang_subgraph": 5, "init_fails_after": 225}
    for bad in ("hang@-1", "init-fails-after=x", "init-fails-after=-2"):
        with pytest.raises(ConfigError, match=rf"--fault '{bad}': expected .*hang@SUBGRAPH, init-fails-after=INITS"):
            parse_fault(bad)


def test_inits_after_the_limit_fail_as_the_driver_fails_them():
    import harness.backends.faults as faults
    ctx = FaultInjectionContext("subgraph 3 (block 1 self_attn)",
                                BackendOptions("faults", {"init_fails_after": faults._inits[0]}))
    with pytest.raises(BackendError, match=r"subgraph 3 \(block 1 self_attn\): init failed: .*Bad address "
                                           r"\(injected: init-fails-after="):
        ctx.init()


def test_only_the_gates_own_errors_are_verdicts():
    assert is_verdict(NumericsError("NaN")) and is_verdict(MemoryGuardTripped("floor"))
    assert not any(is_verdict(e) for e in (BackendError("init failed"), ManifestError("truncated"), None))


def test_the_summary_counts_errors_apart_from_failures():
    tests = [{"nodeid": "t::a", "outcome": "failed", "seconds": 1.0, "message": "AssertionError: SSIM"},
             {"nodeid": "t::b", "outcome": "error", "seconds": 2.0, "message": "Failed: b: init failed"}]
    text = markdown_summary({"outcome": "failed", "counts": {"passed": 0, "failed": 1, "error": 1, "skipped": 0},
                             "tests": tests})
    assert "FAILED: 0 passed, 1 failed, 1 error(s) (infrastructure, not judged), 0 skipped" in text
    assert "| `t::a` | ❌ failed | 1.0 s | SSIM |" in text and "| `t::b` | ⚠️ error | 2.0 s | b: init failed |" in text


def test_a_junit_error_is_lavas_unknown_and_a_failure_its_fail(tmp_path):
    """A real pytest run: a test whose fixture fails (an error) and one whose assert fails (a failure)."""
    artifacts = pytest_artifacts(tmp_path, "import pytest\n"
                                 "@pytest.fixture\ndef run():\n    raise RuntimeError('init failed')\n"
                                 "def test_errors(run):\n    pass\n"
                                 "def test_fails():\n    assert False\n")
    results = {c[1]: c[3] for c in map(shlex.split, lava_commands(artifacts)) if c[0] == "lava-test-case"}
    assert results == {"test_errors": "unknown", "test_fails": "fail"}
