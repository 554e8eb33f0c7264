"""Where the tests live: `-m npu` (smoke, soak) collects tests/acceptance/ alone (tests/conftest.py), so a test
of a gate's tier anywhere else would silently not run there."""
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT
from tests.conftest import GATE_TIERS, GATES_ONLY, only_gates


def collected(artifacts, *args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "--co", "-q",
                           "-p", "no:cacheprovider", f"--artifacts={artifacts}", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr      # 5: nothing collected
    return [line for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.slow       # collects every unit module in a process of its own
def test_no_test_of_a_gates_tier_lives_outside_tests_acceptance(tmp_path):
    tiers = " or ".join(GATE_TIERS)
    misplaced = collected(tmp_path, "-m", tiers, *(f"tests/{name}" for name in GATES_ONLY))
    assert not misplaced, f"marked {tiers} but not in tests/acceptance/: {misplaced}"


@pytest.mark.parametrize("expr, gates", [
    ("npu", True), ("smoke", True), ("soak", True), ("npu and quality", True), ("npu and not (quality and x)", True),
    ("(npu and quality)", True), ("not npu", False), ("npu or benchmark", False), ("quality and npu", False),
    ("npu and (x or y)", False), ("", False), ("slow", False),
])
def test_only_expressions_no_other_test_can_match_take_the_shortcut(expr, gates):
    assert only_gates(expr) is gates
