"""Every output of every subgraph and of the decoder is checked against the manifest (count, shape,
dtype) and for NaN/Inf, and each ONNX file's own metadata must name the subgraph the manifest says."""
import json
import shutil

import numpy as np
import pytest

from harness.backends import live_contexts
from harness.backends.base import BackendOptions
from harness.core.errors import ManifestError, NumericsError
from harness.partition.manifest import SubgraphEntry, TensorSpec
from harness.runtime.run import RunRequest, run_partitioned
from harness.sampling.reference_run import sample_settings
from tests.helpers import export_fp32, random_bundle


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=3)


@pytest.fixture(scope="module")
def partition(model, tmp_path_factory):
    return export_fp32(model, tmp_path_factory)


def run(model, partition, tmp_path, fault):
    report = tmp_path / "report.json"
    with pytest.raises((ManifestError, NumericsError)) as caught:
        run_partitioned(
            RunRequest(model, partition, "faults", "digit one", sample_settings(model, steps=1),
                       backend_options=BackendOptions("faults", fault)),
            report_path=report)
    assert live_contexts() == 0
    saved = json.loads(report.read_text())
    assert saved["status"] == "failed" and saved["error"] == str(caught.value)
    return caught.value


def test_an_output_of_the_wrong_shape_stops_the_run(model, partition, tmp_path):
    # [1, 64, 64] where [2, 64, 64] is declared would broadcast into the residual stream.
    err = run(model, partition, tmp_path, {"shape_subgraph": 5})
    assert isinstance(err, ManifestError)
    assert str(err) == ("subgraph 5 (block 1 ffn): output 'y' is float32 [1, 64, 64], manifest declares "
                        "float32 [2, 64, 64] (file 05_block01_ffn.onnx)")


def test_nan_in_the_decoder_output_stops_the_run(model, partition, tmp_path):
    err = run(model, partition, tmp_path, {"nan_subgraph": model.cfg.subgraphs})
    assert isinstance(err, NumericsError)
    assert "NaN/Inf in the image from subgraph 84 (decoder), file decoder.onnx: 7 of" in str(err)


def test_a_file_that_is_another_subgraph_is_refused(model, partition, tmp_path):
    # Swap two same-shaped files and their checksums: the manifest verifies, the metadata does not.
    swapped = tmp_path / "swapped"
    shutil.copytree(partition, swapped)
    doc = json.loads((swapped / "manifest.json").read_text())
    a, b = doc["subgraphs"][3], doc["subgraphs"][6]       # block 1 and block 2 self_attn
    for key in ("file", "sha256", "bytes"):
        a[key], b[key] = b[key], a[key]
    (swapped / "manifest.json").write_text(json.dumps(doc))
    err = run(model, swapped, tmp_path, {})
    assert "subgraph 3 (block 1 self_attn): file" in str(err)
    assert "is another subgraph per its ONNX metadata (block 2, branch self_attn, index 6)" in str(err)


def entry(dtype="float16"):
    return SubgraphEntry(0, 0, "self_attn", "00.onnx", "", 0, outputs=[TensorSpec("y", (2, 3), dtype)])


def test_output_dtype_and_count_are_checked():
    from harness.partition.checks import check_outputs
    check_outputs(entry(), [np.zeros((2, 3), np.float16)])
    check_outputs(entry(), [np.zeros((2, 3), np.float32)])      # RKNNLite returns float32 by default
    with pytest.raises(ManifestError, match=r"output 'y' is float64 \[2, 3\], manifest declares float16"):
        check_outputs(entry(), [np.zeros((2, 3))])
    with pytest.raises(ManifestError, match="returned 2 outputs, manifest declares 1"):
        check_outputs(entry(), [np.zeros((2, 3), np.float16)] * 2)
    with pytest.raises(ManifestError, match="returned no outputs"):
        check_outputs(entry(), None)
