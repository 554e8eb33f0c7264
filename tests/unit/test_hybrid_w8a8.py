"""The board's hybrid W8A8 FFN built by rknn-toolkit2 from a real calibration capture: INT8 weights
and activations for the two FFN linears, GELU and the branch output in FP16, attention in FP16."""
import re
from pathlib import Path

import numpy as np
import pytest

from harness.backends.base import BackendOptions
from harness.partition.manifest import load_manifest
from harness.runtime.capture import CaptureRecipe, capture_calibration
from harness.sampling.reference_run import sample_settings
from harness.toolkit.layers import parse_layer_table

pytestmark = pytest.mark.toolkit


@pytest.fixture(scope="module")
def hybrid(toolkit_version, embedded_fp32, tmp_path_factory):
    from harness.partition.onnx_export import ExportSettings, export_partition
    from harness.toolkit.convert import ConvertSettings, convert_partition
    bundle, partition = embedded_fp32
    root = tmp_path_factory.mktemp("hybrid")
    settings = sample_settings(bundle, 2)
    capture_calibration(bundle, partition, root / "cal", "digit four", settings,
                        CaptureRecipe(["ffn"], [0, 1], ["cond", "uncond"], blocks=[0]))
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32", blocks=[0]))
    convert_partition(root / "fp32", root / "w8a8",
                      ConvertSettings(version=toolkit_version, precision="w8a8-ffn", calibration=root / "cal",
                                      quiet=True))
    return root


def _tables(build_log: Path) -> dict[str, list]:
    """Each subgraph's layer table from the conversion's build.log."""
    text = build_log.read_text()
    parts = re.split(r"^===== (.+?): .+ =====$", text, flags=re.M)
    return {label: parse_layer_table(body, label) for label, body in zip(parts[1::2], parts[2::2])}


def test_ffn_linears_are_int8_and_gelu_and_output_float16(hybrid):
    tables = _tables(hybrid / "w8a8" / "build.log")
    ffn = tables["subgraph 2 (block 0 ffn)"]
    types = {layer.op_type: set() for layer in ffn}
    for layer in ffn:
        types[layer.op_type].add(layer.data_type)
    linears = [layer for layer in ffn if layer.op_type in ("Conv", "MatMul", "exMatMul")]
    assert len(linears) == 2 and {layer.data_type for layer in linears} == {"INT8"}
    assert types["exGelu"] == {"FLOAT16"}
    assert types["OutputOperator"] == {"FLOAT16"}                 # the branch output leaves in FP16
    for label in ("subgraph 0 (block 0 self_attn)", "subgraph 1 (block 0 cross_attn)"):
        assert "INT8" not in {layer.data_type for layer in tables[label]}, label


def test_hybrid_ffn_is_close_to_fp32_but_not_float16_close(hybrid):
    """On the captured inputs (what it was calibrated for) the INT8 FFN is near FP32, yet measurably
    further than FP16 rounding (>= 0.9999998 on these subgraphs, docs/architecture.md section 8)."""
    import onnxruntime as ort

    from harness.backends import create_context
    from harness.gates.accuracy import cosine
    sim = load_manifest(hybrid / "w8a8")
    entry = sim.subgraphs[2]
    source = load_manifest(hybrid / "fp32")
    session = ort.InferenceSession(str(source.path_of(source.subgraphs[2])), providers=["CPUExecutionProvider"])
    ctx = create_context(BackendOptions("rknn-sim"), entry.label)
    ctx.load(sim.path_of(entry))
    try:
        ctx.init()
        for line in (hybrid / "cal" / "02_block00_ffn.txt").read_text().splitlines():
            x = np.load(hybrid / "cal" / line.split()[0])
            c = cosine(ctx.run([x])[0], session.run(None, {"x": x})[0])
            assert 0.999 < c < 0.99999, c
    finally:
        ctx.release()
