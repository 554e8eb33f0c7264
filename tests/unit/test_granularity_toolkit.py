"""Fused partitions with the real rknn-toolkit2: block and blocks:4 convert with no op on the CPU and
the simulator runs them; a toolkit that crashes on a fused subgraph is named with that subgraph."""
from __future__ import annotations

import numpy as np
import pytest

from harness.core.errors import ToolkitError
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.partition.manifest import load_manifest
from harness.partition.onnx_export import export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from harness.toolkit.convert import convert_partition
from tests.helpers import missing_tool


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(EMBEDDED_DIR)


def _export(bundle, root, granularity, blocks=None):
    out = root / granularity.replace(":", "")
    export_partition(bundle.weights, bundle.cfg, out, dtype="float32", granularity=granularity, blocks=blocks)
    return out


@pytest.mark.toolkit
@pytest.mark.slow
@pytest.mark.parametrize("granularity, contexts", [("block", 28), ("blocks:4", 7)])
def test_fused_partitions_convert_with_no_op_on_the_cpu(bundle, tmp_path, toolkit_version, granularity, contexts):
    converted = tmp_path / "rknn"
    result = convert_partition(_export(bundle, tmp_path, granularity), converted, version=toolkit_version, quiet=True)
    assert all(not ops for ops in result.cpu_ops.values()), result.cpu_ops
    manifest = load_manifest(converted)
    manifest.verify()
    assert manifest.granularity == granularity and len(manifest.subgraphs) == contexts
    assert manifest.blocks_held() == set(range(bundle.cfg.blocks))
    settings = sample_settings(bundle, steps=1)
    sim = run_partitioned(RunRequest(bundle, converted, "rknn-sim", "the number 3", settings)).latent
    ort = run_partitioned(RunRequest(bundle, tmp_path / granularity.replace(":", ""), "onnxruntime",
                                     "the number 3", settings)).latent
    cos = float(np.dot(sim.ravel(), ort.ravel()) / (np.linalg.norm(sim) * np.linalg.norm(ort)))
    assert cos > 0.999, cos


@pytest.mark.toolkit
def test_a_toolkit_crash_names_the_fused_subgraph_it_was_building(bundle, tmp_path):
    """rknn-toolkit2 2.3.2 (the board write-up's) dies with SIGSEGV on a fused block here (measured
    December 2026); the error names the subgraph instead of only the exit code."""
    from harness.toolkit.envs import toolkit_python
    try:
        toolkit_python("2.3.2")
    except ToolkitError:
        missing_tool("no rknn-toolkit2 2.3.2 environment: create it with bin/toolkit-env 2.3.2")
    with pytest.raises(ToolkitError, match=r"2\.3\.2 worker exited with code -11 while building 00_block00"):
        convert_partition(_export(bundle, tmp_path, "block", blocks=[0]), tmp_path / "rknn", version="2.3.2",
                          quiet=True, allow_cpu_ops=True)
