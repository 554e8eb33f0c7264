"""`harness compare-toolkits OLD NEW` with real toolkit environments: the per-subgraph table and the
verdict on a small partition; an absent environment is one line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.config import EMBEDDED_DIR
from harness.core.errors import ToolkitError
from harness.model.bundle import load_bundle
from harness.partition.onnx_export import export_partition
from harness.gates.compare_toolkits import compare_toolkits
from harness.toolkit.envs import toolkit_python
from tests.helpers import missing_tool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def block0(tmp_path_factory):
    bundle = load_bundle(EMBEDDED_DIR)
    out = tmp_path_factory.mktemp("export") / "block0"
    export_partition(bundle.weights, bundle.cfg, out, dtype="float32", blocks=[0])
    return out


def test_absent_version_is_one_line(block0, tmp_path):
    env = {**os.environ, "ANIMA_TOOLKIT_HOME": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "harness", "compare-toolkits", "2.3.2", "2.5.0",
                           "--partition", str(block0), "--out", str(tmp_path / "cmp")],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: toolkit environment 2.3.2 is absent or out of date at {tmp_path / 'none' / '2.3.2'}: "
        f"create it with bin/toolkit-env 2.3.2"]
    assert not (tmp_path / "cmp").exists()


@pytest.mark.toolkit
@pytest.mark.slow
def test_per_subgraph_table_and_verdict(block0, tmp_path, toolkit_version):
    try:
        toolkit_python("2.3.2")
    except ToolkitError:
        missing_tool("no rknn-toolkit2 2.3.2 environment: create it with bin/toolkit-env 2.3.2")
    text = compare_toolkits("2.3.2", "2.5.0", block0, tmp_path / "cmp", quiet=True, images=False)
    rows = [line for line in text.splitlines() if re.match(r"\| subgraph \d", line)]
    assert [r.split(" | ")[0] for r in rows] == [
        "| subgraph 0 (block 0 self_attn)", "| subgraph 1 (block 0 cross_attn)",
        "| subgraph 2 (block 0 ffn)", "| subgraph 84 (decoder)"]
    ffn = rows[2].split(" | ")
    # 2.3.2 leaves the GELU's Erf on the CPU even constant-second; 2.5.0 fuses it onto the NPU.
    assert ffn[3] == "Erf gelu/erf" and ffn[4] == "-"
    # 2.3.2 does not fuse the head-major q/k RMS norm (2.5.0 does): its mean's reshape stays on the CPU.
    for attn in rows[:2]:
        cells = attn.split(" | ")
        assert sorted(cells[3].split(", ")) == ["Reshape k_norm/mean_rs", "Reshape q_norm/mean_rs"] and cells[4] == "-"
    assert all(float(cell) >= 0.9999 for r in rows for cell in r.split(" | ")[1:3])
    assert "**2.5.0 passes**" in text
    reverse = compare_toolkits("2.5.0", "2.3.2", block0, tmp_path / "cmp2", quiet=True, images=False)
    assert ("**2.3.2 fails**: 5 op(s) on the CPU in 3 subgraph(s), first Reshape 'q_norm/mean_rs' in "
            "00_block00_self_attn") in reverse
