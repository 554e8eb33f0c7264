"""Each gate proven able to fail, by running the suite itself (pytest in a subprocess) against a
deliberate defect: a subgraph emitting NaN, the FFN fake-quantised to INT8 (W8A8), and `--require-npu`
off the board. The memory guard's trips are proven in test_memory_guard_trips.py, the benchmark's
regression (a slowed backend) and the other baseline rules in test_baseline_rules.py.
Each runs against the committed embedded model and its goldens.
"""
import json

import pytest

from harness.gates.cases import find_case
from harness.model.config import REPO_ROOT

pytestmark = pytest.mark.slow


def test_numerics_gate_names_the_subgraph_that_emits_nan(run_suite):
    # subgraph 37 = block 12 cross_attn (index = 3 * block + branch)
    result = run_suite("tests/acceptance/test_numerics.py", "--cases=seven", "--backend=faults", "--fault=nan@37")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*step 0, block 12, branch cross_attn, stream cond (subgraph 37): 7 of 4096 values*"])


def test_quality_gate_fails_on_int8_ffn_with_a_diff_artifact(run_suite, pytester):
    # The board's FFN W8A8 what-if (INT8 FFN weights and activations, simulated in the FP16 graph)
    # against the committed FP16 goldens: it must fail SSIM and leave the diff heat map behind.
    result = run_suite("tests/acceptance/test_quality.py", "--cases=seven", "--fake-quant=w8a8-ffn")
    result.assert_outcomes(failed=1)
    seven = find_case(REPO_ROOT / "golden" / "embedded-digits", "seven")     # its bar, as cases.toml states it
    result.stdout.fnmatch_lines([f"*fails SSIM >= {seven.ssim_min} / PSNR >= {seven.psnr_min} dB*"])
    diffs = list((pytester.path / "artifacts").rglob("seven-diff.png"))
    assert diffs and diffs[0].stat().st_size > 1000


def _golden_dir(pytester, steps: int | None = None):
    """An empty golden directory with the shipped cases; `steps` shortens case 'seven'."""
    golden = pytester.path / "golden"
    golden.mkdir()
    cases = (REPO_ROOT / "golden" / "embedded-digits" / "cases.toml").read_text()
    if steps is not None:
        cases = cases.replace('name = "seven"\n', f'name = "seven"\nsteps = {steps}\n')
    (golden / "cases.toml").write_text(cases)
    return golden


def test_goldens_are_not_written_from_int8_unless_forced(run_suite, pytester):
    golden = _golden_dir(pytester)
    result = run_suite("tests/acceptance/test_quality.py", "--cases=seven", "--fake-quant=w8a8-ffn",
                       f"--golden-dir={golden}", "--update-goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*refusing to write a golden from a 'float16+w8a8-ffn' run*"])
    assert not (golden / "seven.npy").exists()


def test_an_update_run_writes_goldens_and_does_not_pass_the_gate(run_suite, pytester):
    # An update judges nothing: the quality test is skipped with what it wrote, never passed.
    # (Two steps: what is written does not matter here, only how the run reports it.)
    golden = _golden_dir(pytester, steps=2)
    result = run_suite("tests/acceptance/test_quality.py", "--cases=seven", f"--golden-dir={golden}",
                       "--update-goldens")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED*goldens written, not compared: {golden / 'seven.npy'}"])
    assert {p.name for p in golden.iterdir()} >= {"seven.npy", "seven.png", "seven.json"}
    assert json.loads((golden / "seven.json").read_text())["case"]["steps"] == 2


def test_require_npu_fails_every_npu_test_off_board(run_suite):
    result = run_suite("tests/acceptance", "-m", "npu", "--require-npu", "--cases=seven")
    outcomes = result.parseoutcomes()
    # numerics, quality (one case each), benchmark, memory at least: every npu test fails, none passes
    assert outcomes.get("failed", 0) >= 4, outcomes
    assert not {"passed", "skipped", "errors", "xfailed", "xpassed"} & set(outcomes), outcomes
    result.stdout.fnmatch_lines(["*--require-npu: not an RK3588 board*"])
