"""The `split` remedy for real: a partition's conversion.toml names a node range of block 0's FFN, convert
builds the rest on rknn-toolkit2 and keeps the range as ONNX, and the runtime (lifecycle/split.py) runs
the NPU parts on the simulator and the range on onnxruntime FP32 between them. Block 0's FFN hidden layer
scaled past float16 (layer1 x 32768, layer2 / 32768) is NaN as converted and passes when split."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.backends.base import live_contexts
from harness.core.errors import ConfigError, ManifestError
from harness.gates.headroom import held_outside_float16
from harness.lifecycle.split import SplitContext
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.model.weights import read_safetensors, save_weights
from harness.partition.manifest import load_manifest
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.toolkit.convert import ConvertSettings, convert_partition
from tests.helpers import converted_subgraph_cosine

pytestmark = pytest.mark.toolkit

FFN = "02_block00_ffn"
WHOLE = 'split = { start = 0, end = 7, first = "layer1", last = "y" }'
MIDDLE = 'split = { start = 2, end = 4, first = "gelu/erf", last = "gelu/one_plus_erf" }'


def _export(root: Path, scale: float) -> Path:
    shutil.copytree(EMBEDDED_DIR, root / "model")
    weights = read_safetensors(root / "model" / "dit.safetensors")
    weights["blocks.0.mlp.layer1.weight"] = weights["blocks.0.mlp.layer1.weight"] * scale
    weights["blocks.0.mlp.layer2.weight"] = weights["blocks.0.mlp.layer2.weight"] / scale
    save_weights(weights, root / "model" / "dit.safetensors")
    bundle = load_bundle(root / "model")
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32", blocks=[0]))
    return root / "fp32"


def _remedy(partition: Path, line: str, version: str) -> None:
    (partition / "conversion.toml").write_text(f'[subgraphs.{FFN}]\n{line}\ntoolkit = "{version}"\n'
                                               f'found_by = "test"\n')


def _ffn_cosine(converted: Path, source: Path) -> tuple[float, object]:
    """The converted FFN run as the runtime runs it, against onnxruntime FP32 of its source ONNX."""
    return converted_subgraph_cosine(converted, source, 2, FFN)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    return _export(tmp_path_factory.mktemp("split-scaled"), 32768.0)


def test_the_host_range_restores_an_overflowing_ffn(scaled, toolkit_version, tmp_path):
    convert_partition(scaled, tmp_path / "plain", ConvertSettings(version=toolkit_version, quiet=True))
    plain, _ = _ffn_cosine(tmp_path / "plain", scaled)
    assert not plain >= 0.9999          # NaN: the hidden layer overflows float16
    _remedy(scaled, WHOLE, toolkit_version)
    convert_partition(scaled, tmp_path / "split", ConvertSettings(version=toolkit_version, quiet=True))
    split, ctx = _ffn_cosine(tmp_path / "split", scaled)
    assert isinstance(ctx, SplitContext) and split >= 0.9999
    record = load_manifest(tmp_path / "split").conversion["subgraphs"][2]
    assert [p["on"] for p in record["split"]["parts"]] == ["host"]
    # the headroom gate judges none of the host range's tensors against the float16 maximum
    held = held_outside_float16(load_manifest(tmp_path / "split"))
    assert set(held) == {2} and {"layer1", "gelu", "y"} <= set(held[2])


def test_npu_parts_around_a_host_range(tmp_path, toolkit_version):
    source = _export(tmp_path, 1.0)
    _remedy(source, MIDDLE, toolkit_version)
    result = convert_partition(source, tmp_path / "rknn",
                               ConvertSettings(version=toolkit_version, samples=1, quiet=True))
    plan = load_manifest(tmp_path / "rknn").subgraphs[2]
    assert plan.file == f"{FFN}.split.json"
    record = result.manifest.conversion["subgraphs"][2]
    assert [(p["on"], p["nodes"]) for p in record["split"]["parts"]] == [("npu", [0, 2]), ("host", [2, 4]),
                                                                         ("npu", [4, 7])]
    value, _ = _ffn_cosine(tmp_path / "rknn", source)
    assert value >= 0.9999
    # the host part is what the plan says it is: another one is refused by its checksum
    host = tmp_path / "rknn" / f"{FFN}.part1.onnx"
    host.write_bytes(host.read_bytes() + b"\0")
    with pytest.raises(ManifestError, match="part1.onnx"):
        _ffn_cosine(tmp_path / "rknn", source)
    assert live_contexts() == 0         # the refused load released the NPU part it had loaded
    assert np.isfinite(value)


def test_a_range_the_export_no_longer_has_is_refused(scaled, toolkit_version, tmp_path):
    _remedy(scaled, 'split = { start = 0, end = 7, first = "layer1", last = "gelu" }', toolkit_version)
    with pytest.raises(ConfigError, match=r"conversion.toml: \[subgraphs.02_block00_ffn\]: split names"):
        convert_partition(scaled, tmp_path / "stale", ConvertSettings(version=toolkit_version, quiet=True))
    assert not (tmp_path / "stale").exists()
