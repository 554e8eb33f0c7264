"""Gates from installed distributions (the `anima.gates` entry-point group, harness/gates/installed.py):
collected under their entry point's name, and a registration two distributions make stops the
collection with one line naming the distribution. docs/extending.md's test (test_extending.py) runs
one, passing and failing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.gates.installed import ENTRY_POINT_GROUP
from tests.unit.test_backend_registry import distribution

ROOT = Path(__file__).resolve().parents[2]


def collect(site: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           f"--artifacts={tmp_path / 'artifacts'}", "-m", "npu", "--cases=seven",
                           "tests/acceptance/test_installed_gates.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_an_installed_gate_is_collected_by_its_name_and_a_duplicate_stops_the_collection(tmp_path):
    site = distribution(tmp_path / "site", "anima-a", {"judge": "anima_a:judge"}, group=ENTRY_POINT_GROUP)
    done = collect(site, tmp_path)
    assert done.returncode == 0 and "test_installed_gate[seven-judge]" in done.stdout, done.stdout + done.stderr
    distribution(site, "anima-b", {"judge": "anima_b:judge"}, group=ENTRY_POINT_GROUP)
    done = collect(site, tmp_path)
    assert done.returncode == 2 and "Interrupted: 1 error during collection" in done.stdout, done.stdout
    assert f"{ENTRY_POINT_GROUP} entry point 'judge': 'judge' is also registered by anima-" in done.stdout
