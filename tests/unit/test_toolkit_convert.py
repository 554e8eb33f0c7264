"""`harness convert` with the real rknn-toolkit2: every subgraph converts, no op on the CPU, the
simulator agrees with onnxruntime FP32, the manifest is verified on use, and every bad input gives one
line, a non-zero exit and no half-written output directory."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from harness.core.errors import ConfigError, ManifestError, ToolkitError
from harness.model import ops
from harness.model import reference as R
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.partition.manifest import load_manifest, manifest_path
from harness.partition.onnx_export import ExportSettings, export_partition
from harness.report.toolkit import cosine_rows
from harness.runtime.run import open_partition
from harness.sampling.reference_run import initial_latents, stream_text_embs
from harness.toolkit.convert import ConvertSettings, convert_partition
from harness.toolkit.precisions import write_dataset
from tests.helpers import missing_tool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(EMBEDDED_DIR)


@pytest.fixture(scope="module")
def block0(bundle, tmp_path_factory):
    """Block 0's three subgraphs and the decoder, FP32: a small partition for the error cases."""
    out = tmp_path_factory.mktemp("export") / "block0"
    export_partition(bundle.weights, bundle.cfg, out, ExportSettings(precision="float32", blocks=[0]))
    return out


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((name, f".{name}")))


def _ffn_calibration(bundle, block0: Path, out: Path) -> Path:
    """The block-0 FFN's inputs from real FP32 forwards: high and low sigma, cond+uncond streams
    (the export serves both streams in one call), from two seeds: 4 samples."""
    cfg, w = bundle.cfg, bundle.all_weights()
    text_embs = stream_text_embs(bundle, [cfg.prompt.get("default", "")], 4.0)
    text_emb = np.concatenate([text_embs[s] for s in text_embs])
    samples = []
    for seed in (0, 1):
        latent = initial_latents(bundle, [seed])
        for sigma in (0.95, 0.1):
            emb, lora = R.time_embedding(w, cfg, np.array([sigma], np.float32))
            mods = R.modulations(w, cfg, emb, lora)
            x = np.repeat(ops.linear(R.patchify(latent, cfg), w["x_embedder.proj.1.weight"]), 2, axis=0)
            _, record = R.block_branches(w, cfg, 0, x, mods, text_emb, R.make_rope(cfg))
            samples.append([record["ffn"][0].astype(np.float32)])
    manifest = load_manifest(block0)
    write_dataset(out, manifest.entry(0, "ffn"), samples)
    return out


# ------------------------------------------------------------------ without a toolkit

def test_absent_environment_is_one_line(block0, tmp_path, monkeypatch):
    monkeypatch.setenv("ANIMA_TOOLKIT_HOME", str(tmp_path / "no-toolkits"))
    out = tmp_path / "conv"
    with pytest.raises(ToolkitError, match=r"toolkit environment 2\.5\.0 is absent .* "
                                           r"create it with bin/toolkit-env 2\.5\.0"):
        convert_partition(block0, out)
    assert _leftovers(tmp_path, "conv") == []


def test_cli_absent_environment_exits_non_zero_with_one_line(block0, tmp_path):
    env = {**os.environ, "ANIMA_TOOLKIT_HOME": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "harness", "convert", str(block0), "--out",
                           str(tmp_path / "conv")], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "bin/toolkit-env" in lines[0]
    assert _leftovers(tmp_path, "conv") == []


def test_unknown_version_names_the_versions_file(block0, tmp_path):
    with pytest.raises(ConfigError, match=r"toolkit version '9\.9\.9' is not in versions\.toml"):
        convert_partition(block0, tmp_path / "conv", ConvertSettings(version="9.9.9"))


def test_float16_export_refused(bundle, tmp_path):
    src = tmp_path / "float16"
    export_partition(bundle.weights, bundle.cfg, src, ExportSettings(precision="float16", blocks=[0]))
    with pytest.raises(ConfigError, match="convert the plain FP32 export"):
        convert_partition(src, tmp_path / "conv")


def test_out_that_is_not_a_conversion_is_left_alone(block0, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="is not a converted partition"):
        convert_partition(block0, out)
    assert (out / "notes.txt").read_text() == "keep me"


# ------------------------------------------------------------------ with the real toolkit

@pytest.mark.toolkit
def test_missing_calibration_set(block0, tmp_path, toolkit_version):
    out = tmp_path / "conv"
    with pytest.raises(ConfigError, match="needs --calibration DIR"):
        convert_partition(block0, out, ConvertSettings(precision="w8a8-ffn"))
    with pytest.raises(ConfigError, match="calibration set directory is missing"):
        convert_partition(block0, out, ConvertSettings(precision="w8a8-ffn", calibration=tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"calibration set for subgraph 2 \(block 0 ffn\) is missing: "
                                          r"no .*02_block00_ffn\.txt"):
        convert_partition(block0, out, ConvertSettings(precision="w8a8-ffn", calibration=tmp_path / "empty"))
    assert _leftovers(tmp_path, "conv") == []


@pytest.mark.toolkit
@pytest.mark.slow
def test_wrong_target(block0, tmp_path, toolkit_version):
    with pytest.raises(ToolkitError, match=r"subgraph 0 \(block 0 self_attn\).*config failed: "
                                           r".*target_platform 'rk9999'"):
        convert_partition(block0, tmp_path / "conv", ConvertSettings(target="rk9999", quiet=True))
    assert _leftovers(tmp_path, "conv") == ["conv.failed.log"]       # the toolkit's log, kept


@pytest.mark.toolkit
@pytest.mark.slow
def test_opset_the_toolkit_rejects(block0, tmp_path, toolkit_version):
    # The exporter refuses opset > 19 itself; a file from elsewhere may not: the toolkit names it.
    import shutil
    src = tmp_path / "opset21"
    shutil.copytree(block0, src)
    manifest = load_manifest(src)
    entry = manifest.entry(0, "ffn")
    model = onnx.load(manifest.path_of(entry))
    model.opset_import[0].version = 21
    model.ir_version = 10
    data = model.SerializeToString()
    manifest.path_of(entry).write_bytes(data)
    import hashlib
    entry.sha256, entry.bytes = hashlib.sha256(data).hexdigest(), len(data)
    manifest.save()
    with pytest.raises(ToolkitError, match=r"subgraph 2 \(block 0 ffn\).*load_onnx failed: "
                                           r".*opset 21, need <= 19"):
        convert_partition(src, tmp_path / "conv", ConvertSettings(quiet=True))
    assert not (tmp_path / "conv").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".converting")]


@pytest.mark.toolkit
@pytest.mark.slow
def test_w8a8_ffn_hybrid_from_fp32_calibration(bundle, block0, tmp_path, toolkit_version):
    calibration = _ffn_calibration(bundle, block0, tmp_path / "calibration")
    result = convert_partition(block0, tmp_path / "conv",
                               ConvertSettings(precision="w8a8-ffn", calibration=calibration, samples=1, quiet=True))
    records = {r["file"]: r for r in result.manifest.conversion["subgraphs"]}
    ffn = records["02_block00_ffn.rknn"]
    assert ffn["quantization"]["hybrid_float"] == ["gelu", "output"] and ffn["quantization"]["dataset"].endswith(
        "02_block00_ffn.txt")
    assert records["00_block00_self_attn.rknn"]["quantization"] is None
    assert all(not r["cpu_ops"] for r in records.values())
    log = (tmp_path / "conv" / "build.log").read_text()
    ffn_log = log[log.index("02_block00_ffn.onnx ->"):log.index("decoder.onnx ->")]
    # INT8 linears, FP16 GELU and output: the layer table of the hybrid build says so.
    assert " Conv               INT8     NPU" in ffn_log and "exGelu             FLOAT16  NPU" in ffn_log
    assert "OutputOperator     FLOAT16" in ffn_log
    rows = {r["file"]: r["cosine"] for r in cosine_rows(result, block0)}
    assert rows["02_block00_ffn.rknn"] > 0.999                 # INT8: close, not FP16-close
    assert rows["00_block00_self_attn.rknn"] >= 0.9999


@pytest.fixture(scope="module")
def converted(bundle, tmp_path_factory, toolkit_version):
    """The whole embedded partition (84 subgraphs + decoder), FP16, one sample through the simulator."""
    root = tmp_path_factory.mktemp("whole")
    export_partition(bundle.weights, bundle.cfg, root / "fp32", ExportSettings(precision="float32"))
    result = convert_partition(root / "fp32", root / "float16", ConvertSettings(samples=1, quiet=True))
    return root, result


@pytest.mark.toolkit
@pytest.mark.slow
def test_whole_partition_converts_with_every_op_on_the_npu(converted):
    root, result = converted
    manifest = load_manifest(root / "float16")
    manifest.verify()
    assert len(manifest.subgraphs) == 84 and manifest.decoder.file == "decoder.rknn"
    assert sorted(p.name for p in (root / "float16").iterdir()) == sorted(
        [e.file for e in manifest.entries()] + ["build.log", "manifest.json"])
    conv = manifest.conversion
    assert (conv["toolkit_version"], conv["target"], conv["precision"]) == ("2.5.0", "rk3588", "float16")
    source = load_manifest(root / "fp32")
    assert [r["onnx_sha256"] for r in conv["subgraphs"]] == [e.sha256 for e in source.entries()]
    assert all(r["build_seconds"] > 0 and r["layers"] > 2 for r in conv["subgraphs"])
    # The CPU-fallback gate ran on all 85 layer tables and passed: nothing off the NPU.
    assert {r["file"]: r["cpu_ops"] for r in conv["subgraphs"] if r["cpu_ops"]} == {}


@pytest.mark.toolkit
@pytest.mark.slow
def test_simulator_matches_onnxruntime_fp32(converted):
    root, result = converted
    rows = cosine_rows(result, root / "fp32")
    assert len(rows) == 85 and all(r["shapes_match"] for r in rows)
    worst = min(rows, key=lambda r: r["cosine"])
    assert worst["cosine"] >= 0.9999, worst


@pytest.mark.toolkit
@pytest.mark.slow
def test_tampered_rknn_fails_the_board_run_naming_the_file(converted, bundle, tmp_path):
    import shutil
    root, _ = converted
    copy = tmp_path / "float16"
    shutil.copytree(root / "float16", copy)
    open_partition(bundle, copy)                        # intact: accepted
    victim = copy / "41_block13_ffn.rknn"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"subgraph 41 \(block 13 ffn\): file '41_block13_ffn\.rknn' "
                                            r"fails its checksum"):
        open_partition(bundle, copy)


@pytest.mark.toolkit
@pytest.mark.slow
def test_convert_replaces_its_previous_output_whole(block0, tmp_path, toolkit_version):
    out = tmp_path / "conv"
    convert_partition(block0, out, ConvertSettings(quiet=True))
    first = json.loads(manifest_path(out).read_text())
    with pytest.raises(ToolkitError):
        convert_partition(block0, out, ConvertSettings(target="rk9999", quiet=True))
    assert json.loads(manifest_path(out).read_text()) == first      # failure: the old output stands


@pytest.mark.toolkit
@pytest.mark.slow
def test_cli_wrong_target_is_one_line_and_non_zero(block0, tmp_path, toolkit_version):
    done = subprocess.run([sys.executable, "-m", "harness", "convert", str(block0), "--out",
                           str(tmp_path / "conv"), "--target", "rk9999", "--quiet"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: rknn-toolkit2 2.5.0: subgraph 0")
    assert "rk9999" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "conv").exists()


@pytest.mark.toolkit
@pytest.mark.slow
def test_cpu_fallback_gate_on_a_real_conversion(block0, tmp_path, toolkit_version):
    # rknn-toolkit2 2.3.2 fuses neither the head-major q/k RMS norm nor the GELU: the norm's mean
    # reshape and the Erf land on the CPU. The gate names the first, and nothing is written but the
    # build log that shows them.
    from harness.toolkit.envs import toolkit_python
    try:
        toolkit_python("2.3.2")
    except ToolkitError:
        missing_tool("no rknn-toolkit2 2.3.2 environment: create it with bin/toolkit-env 2.3.2")
    with pytest.raises(ToolkitError, match=r"CPU fallback: subgraph 0 \(block 0 self_attn\) "
                                           r"\(00_block00_self_attn\.rknn\): "
                                           r"op Reshape 'q_norm/mean_rs' runs on the CPU "
                                           # 2.3.2 gives no reason: the line names the op's input shape
                                           r"\(input \(512,1,1,1\),\(4\)\) "
                                           r"\(and 4 more op\(s\) in 3 subgraph\(s\)\)"):
        convert_partition(block0, tmp_path / "conv", ConvertSettings(version="2.3.2", quiet=True))
    assert _leftovers(tmp_path, "conv") == ["conv.failed.log"]
    log = (tmp_path / "conv.failed.log").read_text()
    assert "Reshape:q_norm/mean_rs" in log and "Erf:gelu/erf" in log
    kept = convert_partition(block0, tmp_path / "kept",
                             ConvertSettings(version="2.3.2", allow_cpu_ops=True, quiet=True))
    assert [(o["op"], o["name"]) for o in kept.cpu_ops["02_block00_ffn"]] == [("Erf", "gelu/erf")]
    assert load_manifest(tmp_path / "kept").conversion["subgraphs"][2]["cpu_ops"] == kept.cpu_ops["02_block00_ffn"]


@pytest.mark.toolkit
@pytest.mark.parametrize("size", ["600k", "1200k"])        # full at the first .rknn / at a later one
def test_disk_full_in_the_output_folder_names_the_subgraph_and_leaves_nothing(block0, tmp_path, toolkit_version,
                                                                             size):
    from tests.helpers import small_tmpfs
    with small_tmpfs(tmp_path / "small", size) as disk:
        done = subprocess.run([sys.executable, "-m", "harness", "convert", str(block0), "--out",
                               str(disk / "conv"), "--quiet"], capture_output=True, text=True, cwd=ROOT)
        left = sorted(p.name for p in disk.iterdir())
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.match(rf"error: rknn-toolkit2 {re.escape(toolkit_version)}: subgraph \d+ \(.*\) \(\S+\.onnx\): "
                    rf"export_rknn failed writing \S+\.rknn into --out {re.escape(str(disk / 'conv'))}: ",
                    lines[0]), lines[0]
    assert "No space left on device" in lines[0]                    # the toolkit's own message, kept
    assert ".converting" not in lines[0]                            # no folder that is gone by now
    assert left == [], f"left in the full folder: {left}"           # no 0-byte log, no work folder
