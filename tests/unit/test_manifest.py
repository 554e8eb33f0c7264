"""The partition manifest: round trip, every verify() failure mode, input checks, inspect and the CLI."""
from __future__ import annotations

import argparse
import json
import shutil

import numpy as np
import pytest

from harness.cli.partition import add_command
from harness.core.errors import HarnessError, ManifestError
from harness.model.config import EMBEDDED_DIR, load_model_dir
from harness.model.weights import random_weights, save_weights
from harness.partition import ExportSettings, check_input, export_partition, inspect_partition, load_manifest
from harness.partition.manifest import FORMAT, MANIFEST_FILE


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One pristine export (block 0 + decoder); tests work on copies of it."""
    cfg = load_model_dir(EMBEDDED_DIR)
    root = tmp_path_factory.mktemp("pristine")
    export_partition(random_weights(cfg), cfg, root, ExportSettings(blocks=[0]))
    return cfg, root


@pytest.fixture
def part(exported, tmp_path):
    _, root = exported
    target = tmp_path / "part"
    shutil.copytree(root, target)
    return target


def edit_manifest(directory, change) -> None:
    path = directory / MANIFEST_FILE
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_round_trip(part, exported):
    cfg, _ = exported
    manifest = load_manifest(part)
    again = load_manifest(part)
    assert manifest.to_dict() == again.to_dict() == json.loads((part / MANIFEST_FILE).read_text())
    assert manifest.format == FORMAT
    assert manifest.model["name"] == cfg.name and manifest.model["network"]["blocks"] == 28
    ex = manifest.export
    assert (ex["dtype"], ex["streams"], ex["opset"], ex["tokens"], ex["text_emb_tokens"]) == \
        ("float32", 2, 17, 64, 8)
    assert ex["latent_size"] == [16, 16] and ex["fp32_islands"] == {}
    assert [(e.index, e.block, e.branch) for e in manifest.subgraphs] == \
        [(0, 0, "self_attn"), (1, 0, "cross_attn"), (2, 0, "ffn")]
    cross = manifest.subgraphs[1]
    assert [(s.name, s.shape, s.dtype) for s in cross.inputs] == \
        [("x", (2, 64, 64), "float32"), ("text_emb", (2, 8, 32), "float32")]
    assert [(s.name, s.shape) for s in cross.outputs] == [("y", (2, 64, 64))]
    assert manifest.decoder.branch == "decoder" and manifest.decoder.index == 84
    assert manifest.decoder.outputs[0].shape == (1, 64, 64, 3)
    assert len(manifest.weights_sha256) == 64
    assert manifest.path_of(cross) == (part / cross.file).resolve()
    assert manifest.path_of(cross).is_absolute()
    manifest.verify()


def test_weights_digest_changes_with_weights(exported, tmp_path):
    cfg, root = exported
    other = export_partition(random_weights(cfg, seed=9), cfg, tmp_path, ExportSettings(blocks=[0]))
    assert other.weights_sha256 != load_manifest(root).weights_sha256


def _cross(directory):
    return load_manifest(directory).subgraphs[1]


def _assert_names_subgraph(exc, entry):
    text = str(exc.value)
    assert "subgraph 1 (block 0 cross_attn)" in text and entry.file in text, text


def test_missing_file(part):
    entry = _cross(part)
    (part / entry.file).unlink()
    with pytest.raises(ManifestError, match="is missing") as exc:
        load_manifest(part).verify()
    _assert_names_subgraph(exc, entry)


def test_truncated_file(part):
    entry = _cross(part)
    path = part / entry.file
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ManifestError, match="truncated") as exc:
        load_manifest(part).verify()
    _assert_names_subgraph(exc, entry)


def test_flipped_byte(part):
    entry = _cross(part)
    path = part / entry.file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="checksum") as exc:
        load_manifest(part).verify()
    _assert_names_subgraph(exc, entry)


@pytest.mark.parametrize("bad", ["../x.onnx", "sub/../../x.onnx", "/etc/passwd", "ABS"])
def test_path_leaving_the_partition(part, bad):
    bad = str((part / "01_block00_cross_attn.onnx").resolve()) if bad == "ABS" else bad
    edit_manifest(part, lambda d: d["subgraphs"][1].update(file=bad))
    with pytest.raises(ManifestError, match="partition directory") as exc:
        load_manifest(part)
    assert "subgraph 1 (block 0 cross_attn)" in str(exc.value) and bad in str(exc.value)


def test_symlink_resolving_outside(part, tmp_path):
    entry = _cross(part)
    outside = tmp_path / "elsewhere.onnx"
    shutil.move(part / entry.file, outside)
    (part / entry.file).symlink_to(outside)
    with pytest.raises(ManifestError, match="outside the partition directory") as exc:
        load_manifest(part)
    _assert_names_subgraph(exc, entry)


def test_malformed_json(part):
    (part / MANIFEST_FILE).write_text('{"format": "anima-partition/4", "subgraphs": [')
    with pytest.raises(ManifestError, match="not valid JSON") as exc:
        load_manifest(part)
    assert MANIFEST_FILE in str(exc.value)


def test_missing_manifest(tmp_path):
    with pytest.raises(ManifestError, match="no manifest"):
        load_manifest(tmp_path)


@pytest.mark.parametrize("field", ["sha256", "bytes", "inputs", "file"])
def test_missing_field(part, field):
    edit_manifest(part, lambda d: d["subgraphs"][2].pop(field))
    with pytest.raises(ManifestError, match=f"subgraphs\\[2\\].*missing field\\(s\\) \\['{field}'\\]"):
        load_manifest(part)


def test_wrong_type(part):
    edit_manifest(part, lambda d: d["subgraphs"][0].update(bytes="1234"))
    with pytest.raises(ManifestError, match="field 'bytes' must be a size in bytes, got '1234'"):
        load_manifest(part)


def test_wrong_order(part):
    edit_manifest(part, lambda d: d.update(subgraphs=[d["subgraphs"][i] for i in (0, 2, 1)]))
    with pytest.raises(ManifestError, match="out of execution order") as exc:
        load_manifest(part)
    assert "block 0 cross_attn" in str(exc.value)


def test_wrong_index(part):
    edit_manifest(part, lambda d: d["subgraphs"][2].update(index=5))
    with pytest.raises(ManifestError, match="index should be 2") as exc:
        load_manifest(part)
    assert "block 0 ffn" in str(exc.value) and "02_block00_ffn.onnx" in str(exc.value)


def test_incomplete_block(part):
    edit_manifest(part, lambda d: d["subgraphs"].pop(2))
    with pytest.raises(ManifestError, match="block 0 lacks its ffn"):
        load_manifest(part)


def test_wrong_format_tag(part):
    edit_manifest(part, lambda d: d.update(format="something-else/9"))
    with pytest.raises(ManifestError, match="format 'something-else/9'"):
        load_manifest(part)


def test_check_input(part):
    entry = _cross(part)
    check_input(entry, "text_emb", np.zeros((2, 8, 32), np.float32))
    with pytest.raises(ManifestError, match=r"subgraph 1 \(block 0 cross_attn\): input 'text_emb'.*\[2, 7, 32\]"):
        check_input(entry, "text_emb", np.zeros((2, 7, 32), np.float32))
    with pytest.raises(ManifestError, match="input 'x' is float16"):
        check_input(entry, "x", np.zeros((2, 64, 64), np.float16))
    with pytest.raises(ManifestError, match="no input 'latent'"):
        check_input(entry, "latent", np.zeros(1, np.float32))


def test_inspect_ok_and_failed(part):
    report = inspect_partition(part)
    assert report["verdict"] == "ok" and report["reasons"] == []
    assert report["branches"]["ffn"]["count"] == 1 and report["branches"]["decoder"]["count"] == 1
    assert report["subgraphs"] == 3 and all(c["ok"] for c in report["checks"])
    assert report["total_bytes"] == sum(p.stat().st_size for p in part.glob("*.onnx"))
    (part / "00_block00_self_attn.onnx").write_bytes(b"junk")
    (part / "decoder.onnx").unlink()
    report = inspect_partition(part)
    assert report["verdict"] == "failed" and len(report["reasons"]) == 2
    assert report["branches"]["self_attn"]["verified"] == 0
    (part / MANIFEST_FILE).write_text("[]")
    assert inspect_partition(part)["verdict"] == "failed"


# ---------------------------------------------------------------- the CLI subcommands

def run_cli(argv) -> int:
    parser = argparse.ArgumentParser()
    add_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_inspect_exit_codes(part, capsys):
    assert run_cli(["inspect", str(part)]) == 0
    assert "verdict: ok" in capsys.readouterr().out
    (part / "02_block00_ffn.onnx").unlink()
    assert run_cli(["inspect", str(part)]) == 1
    out = capsys.readouterr().out
    assert "verdict: failed" in out and "02_block00_ffn.onnx" in out


def test_cli_export_from_model_dir(tmp_path, exported):
    cfg, _ = exported
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(EMBEDDED_DIR / "model.toml", model_dir / "model.toml")
    save_weights(random_weights(cfg), model_dir / cfg.files["weights"])
    out = tmp_path / "out"
    assert run_cli(["export", "--model-dir", str(model_dir), "--out", str(out), "--precision", "float16",
                    "--streams", "1", "--blocks", "2-3", "--quiet"]) == 0
    manifest = load_manifest(out)
    manifest.verify()
    assert [e.index for e in manifest.subgraphs] == list(range(6, 12))
    assert manifest.export["dtype"] == "float16" and manifest.subgraphs[0].inputs[0].shape == (1, 64, 64)
    assert manifest.weights_source.endswith("dit.safetensors")


@pytest.mark.parametrize("argv, match", [
    (["export", "--opset", "20"], "opset 20 is too new"),
    (["export", "--profile", "anima-2b"], "--profile needs --weights"),
    (["export", "--blocks", "0-40"], "outside 0..27"),
    (["export", "--blocks", "x"], "--blocks 'x'"),
])
def test_cli_export_refusals(tmp_path, argv, match):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(EMBEDDED_DIR / "model.toml", model_dir / "model.toml")
    cfg = load_model_dir(model_dir)
    save_weights(random_weights(cfg), model_dir / cfg.files["weights"])
    with pytest.raises(HarnessError, match=match):
        run_cli(argv + ["--model-dir", str(model_dir), "--out", str(tmp_path / "o"), "--quiet"])
    assert not (tmp_path / "o").exists()


def test_cli_export_missing_weights_file(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(EMBEDDED_DIR / "model.toml", model_dir / "model.toml")
    with pytest.raises(HarnessError, match="dit.safetensors"):
        run_cli(["export", "--model-dir", str(model_dir), "--out", str(tmp_path / "o")])



def test_one_file_for_two_subgraphs_is_refused(part):
    edit_manifest(part, lambda d: d["subgraphs"][1].update(file=d["subgraphs"][0]["file"]))
    with pytest.raises(ManifestError, match="file '00_block00_self_attn.onnx' is listed for more than one"):
        load_manifest(part).verify()


def test_decoder_file_shared_with_a_subgraph_is_refused(part):
    edit_manifest(part, lambda d: d["decoder"].update(file=d["subgraphs"][2]["file"]))
    with pytest.raises(ManifestError, match="file '02_block00_ffn.onnx' is listed for more than one"):
        load_manifest(part).verify()


@pytest.mark.parametrize("index", [3, 83, 85])
def test_decoder_out_of_place_is_refused(part, index):
    # The decoder runs after all 28 x 3 subgraphs: its index is 84 whatever blocks were exported.
    edit_manifest(part, lambda d: d["decoder"].update(index=index))
    with pytest.raises(ManifestError, match=r"decoder entry must have branch 'decoder' and index 84 "
                                            r"\(file decoder.onnx\)"):
        load_manifest(part).verify()


def test_another_format_or_no_granularity_is_refused_by_name(part):
    edit_manifest(part, lambda data: data.update(format="anima-partition/3"))
    with pytest.raises(ManifestError, match=r"format 'anima-partition/3' is not the one this suite reads "
                                            r"\(anima-partition/4\)"):
        load_manifest(part)
    edit_manifest(part, lambda data: (data.update(format=FORMAT), data["export"].pop("granularity")))
    with pytest.raises(ManifestError, match=r"export: missing field\(s\) \['granularity'\]"):
        load_manifest(part)
