"""`harness reduce` on rknn-toolkit2's simulator, for real: block 0 of the embedded model with its FFN
hidden layer scaled past float16 (layer1 x 32768, layer2 / 32768: the FP32 output is unchanged), the
one-block FP32 export. reduce must name the MatMul, write a repro that diverges in a fresh toolkit
process, find a remedy that passes the check and write it where convert reads it; convert then builds
the subgraph with it and the simulator's output passes the check."""
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
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.toolkit.envs import toolkit_python

pytestmark = pytest.mark.toolkit

SCALE = 32768.0


def _harness(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=env, timeout=1800)


def _model(target: Path, scale: float) -> Path:
    shutil.copytree(EMBEDDED_DIR, target)
    weights = read_safetensors(target / "dit.safetensors")
    weights["blocks.0.mlp.layer1.weight"] = weights["blocks.0.mlp.layer1.weight"] * scale
    weights["blocks.0.mlp.layer2.weight"] = weights["blocks.0.mlp.layer2.weight"] / scale
    save_weights(weights, target / "dit.safetensors")
    return target


@pytest.fixture(scope="module")
def scaled(tmp_path_factory, toolkit_version):
    """(model dir, FP32 export of block 0) with block 0's FFN scaled."""
    root = tmp_path_factory.mktemp("reduce")
    model = _model(root / "model", SCALE)
    bundle = load_bundle(model)
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32", blocks=[0]))
    return model, root / "fp32"


@pytest.fixture(scope="module")
def reduced(scaled, toolkit_version, tmp_path_factory):
    model, partition = scaled
    out = tmp_path_factory.mktemp("out") / "reduce"
    # a bar INT8 meets (~0.9998 here): the overflow's NaN fails any, and the remedy path is exercised
    done = _harness("reduce", "02_block00_ffn", "--toolkit", toolkit_version, "--model-dir", model,
                    "--partition", partition, "--inputs", "random", "--out", out, "--threshold", "0.999")
    return done, out


def test_reduce_names_the_op_that_overflows(reduced):
    done, out = reduced
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads((out / "report.json").read_text())
    reduction = report["reduction"]
    assert [op["name"] for op in reduction["ops"]] == ["layer1"] and reduction["ops"][0]["op"] == "MatMul"
    assert reduction["cosine"] is None or not np.isfinite(reduction["cosine"])
    tries = [line for line in done.stdout.splitlines() if line.startswith("[reduce] try")]
    assert len(tries) == len(reduction["tries"]) >= 2 and "BAD" in tries[0]


def test_the_repro_diverges_in_a_fresh_toolkit_process(reduced, toolkit_version):
    _, out = reduced
    repro = out / "repro"
    assert sorted(p.name for p in repro.iterdir()) == ["expected0.npy", "input0.npy", "model.onnx",
                                                       "repro.json", "repro.py"]
    done = subprocess.run([str(toolkit_python(toolkit_version)), str(repro / "repro.py")], capture_output=True,
                          text=True, cwd=repro.parent, timeout=600)
    assert done.returncode == 1 and "DIVERGES" in done.stdout, done.stdout + done.stderr[-2000:]


def test_the_remedy_is_written_and_convert_applies_it(reduced, scaled, toolkit_version, tmp_path):
    done, out = reduced
    model, partition = scaled
    report = json.loads((out / "report.json").read_text())
    tried = {r["remedy"]: r for r in report["remedies"]}
    assert not tried["none"]["passes"] and not tried["op_target"]["passes"]
    winner = report["winner"]
    assert winner and winner["written"] == str(partition / "conversion.toml")
    assert tried[winner["remedy"]]["passes"]
    convert = _harness("convert", partition, "--out", tmp_path / "rknn", "--toolkit", toolkit_version,
                       "--sim-samples", "1", "--quiet")
    assert convert.returncode == 0, (convert.stdout + convert.stderr)[-3000:]
    manifest = json.loads((tmp_path / "rknn" / "manifest.json").read_text())
    record = next(r for r in manifest["conversion"]["subgraphs"] if r["file"] == "02_block00_ffn.rknn")
    assert record.get("quantization") or record.get("settings")
    row = next(line for line in convert.stdout.splitlines() if "02_block00_ffn.rknn" in line)
    assert float(row.split("|")[3]) >= report["threshold"], row


def test_a_subgraph_that_passes_has_nothing_to_reduce(tmp_path, toolkit_version):
    bundle = load_bundle(EMBEDDED_DIR)
    export_partition(bundle.weights, bundle.cfg, tmp_path / "fp32", ExportSettings(precision="float32", blocks=[0]))
    done = _harness("reduce", "2", "--toolkit", toolkit_version, "--partition", tmp_path / "fp32",
                    "--inputs", "random", "--out", tmp_path / "out")
    assert done.returncode == 1 and "nothing to reduce" in done.stdout, done.stdout + done.stderr[-2000:]
    assert not (tmp_path / "fp32" / "conversion.toml").exists()


def test_an_unknown_subgraph_is_one_line(scaled, toolkit_version, tmp_path):
    _, partition = scaled
    done = _harness("reduce", "99_nothing", "--toolkit", toolkit_version, "--partition", partition,
                    "--inputs", "random", "--out", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert "99_nothing" in done.stderr and not (tmp_path / "out").exists()
