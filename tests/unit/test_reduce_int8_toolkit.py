"""`harness reduce --int8` for real: block 0's FFN with one hidden unit's activations 100x the others
(layer1 row 7 x 100, layer2 column 7 / 100: the FP32 output is unchanged) built INT8 as w8a8-ffn builds
the FFNs: the per-tensor activation scale the outlier sets leaves the other units a few levels. reduce
must bisect it INT8 to the MatMul, find the float16 island (hybrid quantization) that passes, and
convert --precision w8a8-ffn must build the FFN with that island added to the recipe's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR, REPO_ROOT
from harness.model.weights import read_safetensors, save_weights
from harness.partition.manifest import load_manifest
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.toolkit.convert import ConvertSettings, convert_partition, sample_inputs
from tests.helpers import converted_subgraph_cosine

pytestmark = pytest.mark.toolkit

FFN = "02_block00_ffn"


def _harness(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=1800)


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    shutil.copytree(EMBEDDED_DIR, root / "model")
    weights = read_safetensors(root / "model" / "dit.safetensors")
    weights["blocks.0.mlp.layer1.weight"][7, :] *= 100.0
    weights["blocks.0.mlp.layer2.weight"][:, 7] /= 100.0
    save_weights(weights, root / "model" / "dit.safetensors")
    bundle = load_bundle(root / "model")
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32", blocks=[0]))
    # a calibration set for the FFN (what `harness capture` writes: one list per subgraph)
    entry = load_manifest(root / "fp32").subgraphs[2]
    (root / "cal").mkdir()
    for k, arrays in enumerate(sample_inputs(entry, 4, 1)):
        np.save(root / "cal" / f"s{k}.npy", arrays[0])
    (root / "cal" / f"{FFN}.txt").write_text("".join(f"s{k}.npy\n" for k in range(4)))
    return root


def _ffn_cosine(converted: Path, source: Path) -> float:
    return converted_subgraph_cosine(converted, source, 2, FFN)[0]


def test_an_int8_outlier_is_kept_as_a_float16_island(outlier, toolkit_version, tmp_path):
    fp32 = outlier / "fp32"
    convert_partition(fp32, tmp_path / "plain",
                      ConvertSettings(version=toolkit_version, precision="w8a8-ffn", calibration=outlier / "cal",
                                      quiet=True))
    assert not _ffn_cosine(tmp_path / "plain", fp32) >= 0.999
    done = _harness("reduce", FFN, "--toolkit", toolkit_version, "--int8", "--model-dir", outlier / "model",
                    "--partition", fp32, "--inputs", "random", "--out", tmp_path / "reduce")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads((tmp_path / "reduce" / "report.json").read_text())
    assert report["build"] == "int8" and [op["name"] for op in report["reduction"]["ops"]] == ["layer1"]
    assert report["winner"]["remedy"] == "int8-hybrid"
    convert_partition(fp32, tmp_path / "island",
                      ConvertSettings(version=toolkit_version, precision="w8a8-ffn", calibration=outlier / "cal",
                                      quiet=True))
    record = load_manifest(tmp_path / "island").conversion["subgraphs"][2]
    assert record["quantization"]["custom_hybrid"][-1] == report["remedies"][1]["convert_config"][
        "quantization"]["custom_hybrid"][0]
    assert _ffn_cosine(tmp_path / "island", fp32) >= 0.999
    # a float16 conversion does not take a remedy found on the INT8 build
    plain16 = convert_partition(fp32, tmp_path / "f16", ConvertSettings(version=toolkit_version, quiet=True))
    assert plain16.manifest.conversion["subgraphs"][2]["quantization"] is None
