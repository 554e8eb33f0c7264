"""The numerics and quality gates on rknn-toolkit2's PC simulator (`--backend rknn-sim`): the suite
itself, in a fresh pytest process, on the partition converted on first use (kept in the repository's
.cache like the exported ones, so later runs skip the conversion)."""
import os
import re
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT

pytestmark = [pytest.mark.toolkit, pytest.mark.slow]


def _gates(tmp_path, *args):
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
           "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-m", "npu", "-k", "numerics or quality",
           "--backend=rknn-sim", f"--artifacts={tmp_path / 'artifacts'}",
           f"--cache-dir={REPO_ROOT / '.cache'}", *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000,
                          env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stdout + proc.stderr


def test_float16_conversion_passes_numerics_and_quality_on_the_simulator(toolkit_version, tmp_path):
    code, out = _gates(tmp_path)
    assert code == 0, out[-3000:]
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) >= 6 and " failed" not in out, out[-3000:]   # numerics + quality per case
