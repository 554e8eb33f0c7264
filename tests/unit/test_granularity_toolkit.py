"""Fused partitions with the real rknn-toolkit2: block and blocks:4 convert with no op on the CPU and
the simulator runs them; a toolkit that crashes on a fused subgraph is named with that subgraph."""
from __future__ import annotations

import numpy as np
import pytest

from harness.core.errors import ToolkitError
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.partition.manifest import load_manifest
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from harness.toolkit.convert import ConvertSettings, convert_partition
from tests.helpers import missing_tool


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(EMBEDDED_DIR)


def _export(bundle, root, granularity, blocks=None):
    out = root / granularity.replace(":", "")
    export_partition(bundle.weights, bundle.cfg, out,
                     ExportSettings(precision="float32", granularity=granularity, blocks=blocks))
    return out


@pytest.mark.toolkit
@pytest.mark.slow
@pytest.mark.parametrize("granularity, contexts", [("block", 28), ("blocks:4", 7)])
def test_fused_partitions_convert_with_no_op_on_the_cpu(bundle, tmp_path, toolkit_version, granularity, contexts):
    converted = tmp_path / "rknn"
    result = convert_partition(_export(bundle, tmp_path, granularity), converted,
                               ConvertSettings(version=toolkit_version, quiet=True))
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


def _toolkit(version: str) -> str:
    from harness.toolkit.envs import toolkit_python
    try:
        toolkit_python(version)
    except ToolkitError:
        missing_tool(f"no rknn-toolkit2 {version} environment: create it with bin/toolkit-env {version}")
    return version


@pytest.mark.toolkit
@pytest.mark.slow
def test_the_board_write_ups_toolkit_converts_a_fused_block(bundle, tmp_path):
    """rknn-toolkit2 2.3.2 (the board's) builds the fused block too (its modulations are fed
    [S, 1, D]: see the next test for the shape it dies on), with what it leaves on the CPU for the
    branch partition of the same block and nothing more (2.3.2 runs GELU's Erf on the CPU)."""
    version = _toolkit("2.3.2")

    def cpu_op_types(granularity):
        result = convert_partition(_export(bundle, tmp_path, granularity, blocks=[0]), tmp_path / f"rknn-{granularity}",
                                   ConvertSettings(version=version, quiet=True, allow_cpu_ops=True))
        return sorted(op["op"] for ops in result.cpu_ops.values() for op in ops)
    assert cpu_op_types("block") == cpu_op_types("branch")


def _layer_norm_then_modulation(path, mod_shape):
    """LN(x) * (1 + scale) + shift, scale and shift graph inputs of `mod_shape`, then a MatMul."""
    import onnx
    from onnx import helper

    from harness.partition.fused import add_layer_norm
    from harness.partition.graph import Graph
    g = Graph("float32", 17)
    inputs = [helper.make_tensor_value_info("x", g.elem, [2, 16, 32])]
    inputs += [helper.make_tensor_value_info(n, g.elem, mod_shape) for n in ("scale", "shift")]
    one_plus = g.op("Add", [g.const("one", 1.0), "scale"], "one_plus_scale")
    h = g.op("Add", [g.op("Mul", [add_layer_norm(g, "x", 1e-6), one_plus], "modulated"), "shift"], "h")
    g.op("MatMul", [h, g.const("w", np.eye(32, dtype=np.float32))], "y")
    onnx.save(g.model("probe", inputs, [helper.make_tensor_value_info("y", g.elem, [2, 16, 32])], "probe", {}),
              path)
    return str(path)


@pytest.mark.toolkit
def test_a_toolkit_crash_names_the_subgraph_it_was_building(tmp_path):
    """2.3.2 dies with SIGSEGV on a LayerNorm followed by a [1, 1, D] modulation (measured December
    2026; [S, 1, D] builds): the error names the subgraph being built, not only the exit code."""
    from harness.toolkit.process import run_worker
    version = _toolkit("2.3.2")
    items = [{"name": name, "onnx": _layer_norm_then_modulation(tmp_path / f"{name}.onnx", shape),
              "rknn": f"{name}.rknn", "quantization": None}
             for name, shape in (("rows_s1d", [2, 1, 32]), ("rows_11d", [1, 1, 32]))]
    job = {"out_dir": str(tmp_path), "items": items,
           "config": {"target_platform": "rk3588", "float_dtype": "float16", "optimization_level": 3}}
    with pytest.raises(ToolkitError, match=r"2\.3\.2 worker exited with code -11 while building rows_11d"):
        run_worker(version, job, tmp_path / "job.json", lambda event: None)
