"""Each gate proven able to fail, by running the suite itself (pytest in a subprocess) against a
deliberate defect: a subgraph emitting NaN, the FFN fake-quantised to INT8 (W8A8), and `--require-npu`
off the board. The memory guard's trips are proven in test_memory_guard_trips.py, the benchmark's
regression (a slowed backend) and the other baseline rules in test_baseline_rules.py.
Each runs against the committed embedded model and its goldens.
"""
import os
import subprocess
import sys

import pytest

from harness.config import REPO_ROOT

pytestmark = pytest.mark.slow


def suite(tmp_path, *args):
    """Run the suite's gates in a fresh pytest process; returns (exit code, combined output)."""
    # Run from tmp_path: pytest-benchmark shows stored runs relative to the working directory.
    args = [str(REPO_ROOT / a) if a.startswith("tests/") else a for a in args]
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
           "-p", "no:cacheprovider", "-q", f"--artifacts={tmp_path / 'artifacts'}",
           f"--history={tmp_path / 'history.jsonl'}", f"--cache-dir={tmp_path / 'cache'}",
           "--benchmark-storage=file://./bench", *args]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stdout + proc.stderr


def test_numerics_gate_names_the_subgraph_that_emits_nan(tmp_path):
    # subgraph 37 = block 12 cross_attn (index = 3 * block + branch)
    code, out = suite(tmp_path, "tests/acceptance/test_numerics.py", "--cases=seven",
                      "--backend=faults", "--fault=nan@37")
    assert code == 1, out
    assert "step 0, block 12, branch cross_attn, stream cond (subgraph 37): 7 of 4096 values" in out


def test_quality_gate_fails_on_int8_ffn_with_a_diff_artifact(tmp_path):
    # The board's FFN W8A8 what-if (INT8 FFN weights and activations, simulated in the FP16 graph)
    # against the committed FP16 goldens: it must fail SSIM and leave the diff heat map behind.
    code, out = suite(tmp_path, "tests/acceptance/test_quality.py", "--cases=seven", "--fake-quant=ffn-w8a8")
    assert code == 1, out
    assert "fails SSIM >= 0.9999" in out
    diffs = list((tmp_path / "artifacts").rglob("seven-diff.png"))
    assert diffs and diffs[0].stat().st_size > 1000


def test_goldens_are_not_written_from_int8_unless_forced(tmp_path):
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "cases.toml").write_text((REPO_ROOT / "golden" / "embedded-digits" / "cases.toml").read_text())
    code, out = suite(tmp_path, "tests/acceptance/test_quality.py", "--cases=seven", "--fake-quant=ffn-w8a8",
                      f"--golden-dir={golden}", "--update-goldens")
    assert code == 1 and "refusing to write a golden from a 'float16+ffn-w8a8' run" in out, out
    assert not (golden / "seven.npy").exists()


def test_require_npu_fails_every_npu_test_off_board(tmp_path):
    code, out = suite(tmp_path, "tests/acceptance", "-m", "npu", "--require-npu", "--cases=seven")
    assert code == 1, out
    assert "--require-npu: not an RK3588 board" in out
    assert " passed" not in out.splitlines()[-1]
