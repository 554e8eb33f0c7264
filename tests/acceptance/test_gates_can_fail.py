"""Each gate proven able to fail, by running the suite itself (pytest in a subprocess) against a
deliberate defect: a subgraph emitting NaN, FFN weights fake-quantised to INT8, a slowed backend, and
`--require-npu` off the board. The memory guard's trips are proven in test_memory_guard_trips.py.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import EMBEDDED_DIR, REPO_ROOT
from harness.model.bundle import load_bundle
from tests.helpers import copy_model_dir, fake_quantize_ffn

pytestmark = pytest.mark.slow


def suite(tmp_path, *args):
    """Run the suite's gates in a fresh pytest process; returns (exit code, combined output)."""
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), "-p", "no:cacheprovider",
           "-q", f"--artifacts={tmp_path / 'artifacts'}", f"--history={tmp_path / 'history.jsonl'}",
           f"--cache-dir={tmp_path / 'cache'}", "--benchmark-storage", f"file://{tmp_path / 'bench'}",
           *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stdout + proc.stderr


def test_numerics_gate_names_the_subgraph_that_emits_nan(tmp_path):
    # subgraph 37 = block 12 cross_attn (index = 3 * block + branch)
    code, out = suite(tmp_path, "tests/acceptance/test_numerics.py", "--cases=seven",
                      "--backend=faults", "--fault=nan@37")
    assert code == 1, out
    assert "step 0, block 12, branch cross_attn, stream cond (subgraph 37): 7 of 4096 values" in out


def test_quality_gate_fails_on_int8_ffn_weights_with_a_diff_artifact(tmp_path):
    bundle = load_bundle(EMBEDDED_DIR)
    model = copy_model_dir(EMBEDDED_DIR, tmp_path / "w8-ffn", fake_quantize_ffn(bundle.weights))
    code, out = suite(tmp_path, "tests/acceptance/test_quality.py", "--cases=seven",
                      f"--model-dir={model}", f"--golden-dir={REPO_ROOT / 'golden' / 'embedded-digits'}")
    assert code == 1, out
    assert "fails SSIM >= 0.9999" in out
    diffs = list((tmp_path / "artifacts").rglob("seven-diff.png"))
    assert diffs and diffs[0].stat().st_size > 1000


def test_benchmark_compare_fails_a_slowed_backend(tmp_path):
    common = ("tests/acceptance/test_benchmark.py", "--bench-steps=2")
    code, out = suite(tmp_path, *common, "--benchmark-autosave")
    assert code == 0, out
    code, out = suite(tmp_path, *common, "--backend=faults", "--fault=slow=0.004",
                      "--benchmark-compare", "--benchmark-compare-fail=mean:25%")
    assert code == 1, out
    assert "Performance has regressed" in out
    assert len((tmp_path / "history.jsonl").read_text().splitlines()) == 2


def test_require_npu_fails_every_npu_test_off_board(tmp_path):
    code, out = suite(tmp_path, "-m", "npu", "--require-npu", "--cases=seven")
    assert code == 1, out
    assert "--require-npu: not an RK3588 board" in out
    assert " passed" not in out.splitlines()[-1]
