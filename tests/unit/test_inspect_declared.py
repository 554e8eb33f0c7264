"""`inspect` opens every file and checks what it declares against its manifest entry: a re-signed
ONNX subgraph with an extra output, and a converted partition whose manifest claims another
toolkit version than its .rknn files carry, both used to end with `verdict: ok`."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from harness.backends.rknn_sim import conversion_record
from harness.core.errors import ManifestError
from harness.model.config import REPO_ROOT
from harness.partition.inspection import inspect_partition
from harness.toolkit.convert import ConvertSettings, convert_partition
from tests.helpers import add_output_and_resign, export_fp32, random_bundle, resign


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return random_bundle(tmp_path_factory, seed=3)


@pytest.fixture(scope="module")
def partition(bundle, tmp_path_factory):
    return export_fp32(bundle, tmp_path_factory)


def _inspect(directory):
    return subprocess.run([sys.executable, "-m", "harness", "inspect", str(directory)], capture_output=True,
                          text=True, cwd=REPO_ROOT,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)})


def test_resigned_onnx_with_an_extra_output_fails_inspect(partition, tmp_path):
    bad = tmp_path / "extra-output"
    shutil.copytree(partition, bad)
    hidden = add_output_and_resign(bad, 5)
    report = inspect_partition(bad)
    assert report["verdict"] == "failed"
    assert len(report["reasons"]) == 1 and "subgraph 5 (block 1 ffn)" in report["reasons"][0]
    assert f"declares outputs [y float32 [2, 64, 64], {hidden}" in report["reasons"][0]
    done = _inspect(bad)
    assert done.returncode == 1 and "verdict: failed" in done.stdout


def test_an_untouched_partition_passes_inspect(partition):
    assert inspect_partition(partition)["verdict"] == "ok"


@pytest.fixture(scope="module")
def conversion(bundle, tmp_path_factory, toolkit_version):
    from harness.partition.onnx_export import ExportSettings, export_partition
    block0 = tmp_path_factory.mktemp("block0") / "fp32"
    export_partition(bundle.weights, bundle.cfg, block0, ExportSettings(precision="float32", blocks=[0]))
    out = tmp_path_factory.mktemp("conv") / "rknn"
    convert_partition(block0, out, ConvertSettings(version=toolkit_version, quiet=True))
    return out


def _claim(conversion, tmp_path, version: str):
    bad = tmp_path / "claims-other-version"
    shutil.copytree(conversion, bad)
    doc = json.loads((bad / "manifest.json").read_text())
    doc["conversion"]["toolkit_version"] = version
    (bad / "manifest.json").write_text(json.dumps(doc))
    return bad


@pytest.mark.toolkit
def test_a_manifest_claiming_another_toolkit_version_fails_inspect(conversion, tmp_path, toolkit_version):
    other = "2.3.2" if toolkit_version != "2.3.2" else "2.5.0"
    assert inspect_partition(conversion)["verdict"] == "ok"
    report = inspect_partition(_claim(conversion, tmp_path, other))
    assert report["verdict"] == "failed" and len(report["reasons"]) == 4, report["reasons"]
    assert (f"subgraph 0 (block 0 self_attn): 00_block00_self_attn.rknn was built by rknn-toolkit2 "
            f"{toolkit_version}, the manifest's conversion says {other}") in report["reasons"][0]


@pytest.mark.toolkit
def test_the_simulator_names_the_version_mismatch_not_an_environment(conversion, tmp_path, toolkit_version):
    other = "2.3.2" if toolkit_version != "2.3.2" else "2.5.0"
    bad = _claim(conversion, tmp_path, other)
    with pytest.raises(ManifestError, match=rf"decoder\.rknn was built by rknn-toolkit2 {toolkit_version}, "
                                            rf"the conversion record of .* says {other}"):
        conversion_record(bad / "decoder.rknn")


@pytest.mark.toolkit
def test_a_tampered_rknn_fails_inspect_even_re_signed(conversion, tmp_path):
    bad = tmp_path / "tampered"
    shutil.copytree(conversion, bad)
    path = bad / "decoder.rknn"
    path.write_bytes(path.read_bytes()[:-40])       # its model description cut short, re-signed
    resign(bad, 84)
    report = inspect_partition(bad)
    assert report["verdict"] == "failed"
    assert "decoder.rknn: no rknn-toolkit2 model description" in report["reasons"][0]
