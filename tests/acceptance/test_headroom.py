"""Gate: FP16 headroom. Over a whole denoise of each golden case, every subgraph's inputs, output and
the intermediates that overflow first (FFN hidden layer, attention logits) stay a stated factor below
the float16 maximum, so a board whose activations run larger than here still stays finite. Each run
report carries the headroom of every subgraph (artifacts/runs/<case>-headroom.json)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from harness.gates.headroom import headroom_failures, min_headroom_of
from harness.gates.runner import memory_case
from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from harness.model.weights import read_safetensors, save_weights
from harness.pytest_plugin.fixtures import judged_run

# Headroom is mostly the network's: the fast tier judges the first case of each sampler, the full
# suite and -m npu every case (each a whole probed denoise, ~3-7 s here; for every case but the first
# it is the case's only render, which numerics and quality judge too).
FAST_TIER_CASES = 1


@pytest.fixture
def headroom_run(request, golden_case, golden_cases, gate_runner, npu_guard):
    """(the probed run, its headroom section), made in setup (judged_run): a run the board could not finish
    is the test's error."""
    limit = min_headroom_of(gate_runner.bundle.cfg)
    # Every case but the one the memory gate measures: this run is also the one numerics and
    # quality judge (one render per case).
    share = golden_case.name != memory_case(golden_cases).name
    sections = []

    def probed():
        run, section = gate_runner.headroom_run(golden_case, npu_guard, limit, share=share)
        sections.append(section)
        return run
    run = judged_run(request, golden_case, probed)
    return run, sections[0] if sections else None


@pytest.mark.npu
def test_float16_headroom_of_every_subgraph(golden_case, headroom_run, gate_runner):
    run, section = headroom_run
    failures = headroom_failures(section)
    if failures:
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        pytest.fail(f"{golden_case.name}: " + "; ".join(failures[:5]) + more
                    + f" (report: {run.report_path})", pytrace=False)
    if run.error is not None:
        pytest.fail(f"{golden_case.name}: run failed before headroom could be judged: {run.error}", pytrace=False)
    # The report names every subgraph of the network, each with its lowest headroom.
    report = json.loads(run.report_path.read_text())
    seen = {s["subgraph"] for s in report["headroom"]["subgraphs"]}
    assert seen == set(range(gate_runner.subgraphs)), sorted(seen)     # of the granularity under test


# ---------------------------------------------------------------- the gate can fail
# (not npu-marked: these run the gate in a fresh suite process, as tests/acceptance/test_gates_can_fail.py)

def _scaled_model(tmp_path, block: int, scale: float):
    """The embedded model with block `block`'s FFN hidden layer `scale` x larger (layer1 x scale,
    layer2 / scale): its FP16 hidden activations grow by `scale` while the branch output does not."""
    target = tmp_path / "model"
    shutil.copytree(EMBEDDED_DIR, target)
    weights = read_safetensors(target / "dit.safetensors")
    key = f"blocks.{block}.mlp."
    weights[key + "layer1.weight"] = weights[key + "layer1.weight"] * scale
    weights[key + "layer2.weight"] = weights[key + "layer2.weight"] / scale
    save_weights(weights, target / "dit.safetensors")
    return target


@pytest.fixture
def run_headroom_gate(pytester, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")

    def run(model_dir):
        return pytester.runpytest_subprocess(
            "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}", "-p", "no:cacheprovider", "-q",
            str(REPO_ROOT / "tests/acceptance/test_headroom.py"), "-k", "every_subgraph", "--cases=seven",
            f"--model-dir={model_dir}", f"--golden-dir={REPO_ROOT / 'golden' / 'embedded-digits'}",
            f"--artifacts={pytester.path / 'artifacts'}", f"--cache-dir={pytester.path / 'cache'}",
            "--backend=onnxruntime", timeout=300)
    return run


@pytest.mark.slow
@pytest.mark.parametrize("scale, line, overflowed", [
    # Block 4's FFN hidden layer peaks at ~4.3 here; x4096 puts it near 17,600: still finite (the
    # numerics gate passes such a run) but within 8x of 65504, so the headroom gate must name it.
    (4096.0, "*subgraph 14 (block 4 ffn): tensor layer1 peaked at * at step *, stream *: "
             "headroom *x to the FP16 maximum 65504, below 8x*", False),
    # x32768 takes the hidden layer past 65504: inf in FP16; the gate names the tensor that
    # overflowed first, not only the NaN the branch output then carries.
    (32768.0, "*subgraph 14 (block 4 ffn): tensor layer1 peaked at inf/NaN (overflowed) at step 0, "
              "stream *: headroom 0x*", True),
], ids=["near-overflow", "overflow"])
def test_headroom_gate_names_the_scaled_ffn(run_headroom_gate, tmp_path, scale, line, overflowed):
    result = run_headroom_gate(_scaled_model(tmp_path, 4, scale))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([line])
    assert ("overflowed" in result.stdout.str()) == overflowed


@pytest.mark.toolkit
@pytest.mark.slow
def test_headroom_gate_on_the_simulator(toolkit_version, tmp_path):
    # The same gate on rknn-toolkit2's PC simulator: the converted FP16 partition (converted on first
    # use into the repository's .cache), its intermediates probed by the toolkit's own build. A plain
    # subprocess, not pytester: the toolkit environments live under the real HOME.
    cmd = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
           "-p", "no:cacheprovider", "-p", "no:randomly", "-q", str(REPO_ROOT / "tests/acceptance/test_headroom.py"),
           "-k", "every_subgraph", "--cases=seven", "--backend=rknn-sim", f"--artifacts={tmp_path / 'artifacts'}",
           f"--cache-dir={REPO_ROOT / '.cache'}"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    report = json.loads((tmp_path / "artifacts" / "runs" / "seven-headroom.json").read_text())
    section = report["headroom"]
    assert report["backend"] == "rknn-sim" and section["intermediates"] == "probed"
    assert len(section["subgraphs"]) == 84
    assert all({"layer1", "gelu"} <= set(s["tensors"]) or {"attn/qk", "attn/scores"} <= set(s["tensors"])
               for s in section["subgraphs"])
