"""Checkpoints as the board needs them: host tensors only, BF16/F16/F32, a reported key prefix,
ignored extra groups, one line naming the tensor for each kind of damage, and an export that holds
one block at a time."""
import json
import struct
import tracemalloc

import numpy as np
import pytest
from safetensors.numpy import save_file

from harness.cli.main import main
from harness.core.errors import WeightsError
from harness.model.bundle import load_bundle
from harness.model.checkpoint import Checkpoint, is_host_key
from harness.model.config import load_profile
from harness.model.random_checkpoint import random_tensor, write_random_checkpoint
from harness.model.safetensors_io import bf16_bits_to_f32, f32_to_bf16_bits
from harness.model.weights import expected_shapes, weights_digest
from harness.partition.onnx_export import ExportSettings, export_partition

ANIMA_SHAPED = "models/anima-shaped"


@pytest.fixture(scope="module")
def cfg():
    return load_profile("cosmos-tiny")


@pytest.fixture(scope="module")
def bf16_file(cfg, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "anima-like.safetensors"
    write_random_checkpoint(cfg, path, "bfloat16", prefix="net.", llm_adapter=True, seed=3)
    return path


def test_bf16_rounding_matches_round_to_nearest_even():
    values = np.array([1.0, 1.00390625, 1.005859375, -3.14159, 65504.0, 1e-30], np.float32)
    back = bf16_bits_to_f32(f32_to_bf16_bits(values))
    assert back[0] == 1.0 and back[1] == 1.0          # halfway rounds to the even mantissa
    assert back[2] == np.float32(1.0078125)
    np.testing.assert_allclose(back, values, rtol=2 ** -8)


def test_bf16_prefixed_checkpoint_with_adapter_is_read_and_reported(cfg, bf16_file):
    ck = Checkpoint(bf16_file, cfg)
    assert ck.prefix == "net."
    line = ck.summary_line()
    assert "(BF16 47)" in line and "key prefix 'net.' stripped" in line
    assert "8 other tensors ignored (llm_adapter 8)" in line
    key = "blocks.1.mlp.layer1.weight"
    expected = bf16_bits_to_f32(f32_to_bf16_bits(random_tensor(key, (256, 64), 3)))
    np.testing.assert_array_equal(ck.read([key])[key], expected)
    roles = {row["group"]: row["role"] for row in ck.groups()}
    assert roles["blocks.mlp"] == "NPU" and roles["blocks.adaln_modulation_mlp"] == "host"
    assert roles["llm_adapter"] == "ignored" and roles["t_embedder"] == "host"


@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_float16_and_float32_checkpoints_hold_the_same_model(cfg, tmp_path, precision):
    path = tmp_path / f"{precision}.safetensors"
    write_random_checkpoint(cfg, path, precision, seed=3)
    key = "final_layer.linear.weight"
    got = Checkpoint(path, cfg).read([key])[key]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, random_tensor(key, got.shape, 3), rtol=1e-3 if precision == "float16" else 0)


def test_host_loads_only_the_host_tensors():
    bundle = load_bundle(ANIMA_SHAPED)
    expected = {k for k in expected_shapes(bundle.cfg) if is_host_key(k)}
    assert set(bundle.weights) == expected
    assert not any(".mlp." in k or ".self_attn." in k or ".cross_attn." in k for k in bundle.weights)
    # the digest still covers every tensor, streamed: the same as hashing the whole model at once
    assert bundle.digest == weights_digest(bundle.all_weights())
    # the AdaLN layers stay in the mapped file; a step's modulations read them and match the full dict
    assert bundle.weights.streamed and not any("adaln_modulation_" in k and k.startswith("blocks.")
                                               for k in bundle.weights.resident)
    from harness.model import reference as R
    full = bundle.all_weights()
    emb, lora = R.time_embedding(full, bundle.cfg, np.array([0.7], np.float32))
    streamed = R.modulations(bundle.weights, bundle.cfg, emb, lora)
    for key, value in R.modulations(full, bundle.cfg, emb, lora).items():
        np.testing.assert_array_equal(streamed[key][2], value[2])


def _header(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw


@pytest.mark.parametrize("damage,message", [
    ("truncate", r"tensor 'net\.final_layer\.linear\.weight' ends at byte \d+ but the file has \d+ bytes \(truncated"),
    ("missing", r"missing tensor 'net\.blocks\.1\.cross_attn\.k_norm\.weight'"),
    ("shape",
     r"tensor 'net\.blocks\.0\.mlp\.layer1\.weight' has shape \[8, 64\], profile cosmos-tiny expects \[256, 64\]"),
    ("dtype", r"tensor 'net\.blocks\.0\.self_attn\.q_proj\.weight' has dtype I8; supported: F32, F16, BF16"),
])
def test_damaged_checkpoint_gives_one_line_naming_the_tensor(cfg, bf16_file, tmp_path, capsys, damage, message):
    bad = tmp_path / "bad.safetensors"
    if damage == "truncate":
        raw = bf16_file.read_bytes()
        header, _ = _header(bf16_file)
        last = max(header[k]["data_offsets"][1] for k in header if k != "__metadata__")
        # cut into the last DiT tensor's data (the adapter tensors come after the DiT's)
        end = 8 + struct.unpack("<Q", raw[:8])[0] + header["net.final_layer.linear.weight"]["data_offsets"][1]
        assert end < 8 + struct.unpack("<Q", raw[:8])[0] + last + 1
        bad.write_bytes(raw[:end - 100])
    else:
        tensors = {k: v for k, v in Checkpoint(bf16_file, cfg).read(expected_shapes(cfg)).items()}
        tensors = {"net." + k: v for k, v in tensors.items()}
        if damage == "missing":
            del tensors["net.blocks.1.cross_attn.k_norm.weight"]
        elif damage == "shape":
            tensors["net.blocks.0.mlp.layer1.weight"] = np.zeros((8, 64), np.float32)
        else:
            tensors["net.blocks.0.self_attn.q_proj.weight"] = np.zeros((64, 64), np.int8)
        save_file(tensors, str(bad))
    with pytest.raises(WeightsError, match=message):
        Checkpoint(bad, cfg)
    assert main(["inspect-checkpoint", str(bad), "--profile", "cosmos-tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "bad.safetensors" in err[0]


def test_inspect_checkpoint_lists_groups_and_who_needs_them(bf16_file, capsys):
    assert main(["inspect-checkpoint", str(bf16_file), "--profile", "cosmos-tiny"]) == 0
    out = capsys.readouterr().out
    for text in ("blocks.mlp", "NPU", "host", "ignored", "llm_adapter", "key prefix 'net.' stripped"):
        assert text in out, text


def test_export_holds_one_block_at_a_time(tmp_path):
    """Python-side peak memory of an export (tracemalloc sees numpy's buffers) against the size of
    one block and of the whole model, on a wider model where the difference is clear."""
    wide = tmp_path / "wide.toml"
    text = (load_profile("cosmos-tiny").source and open(load_profile("cosmos-tiny").source).read())
    wide.write_text(text.replace("blocks = 2", "blocks = 6").replace("width = 64", "width = 256")
                    .replace("latent_size = [8, 8]", "latent_size = [4, 4]"))
    cfg = load_profile(wide)
    path = tmp_path / "wide.safetensors"
    write_random_checkpoint(cfg, path, "bfloat16", seed=1)
    shapes = expected_shapes(cfg)
    block = sum(4 * np.prod(s) for k, s in shapes.items() if k.startswith("blocks.0."))
    model = sum(4 * np.prod(s) for s in shapes.values())
    tracemalloc.start()
    try:
        export_partition(Checkpoint(path, cfg), cfg, tmp_path / "p", ExportSettings(precision="float16", streams=1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"export peak (tracemalloc) {peak / 2**20:.1f} MiB; one block {block / 2**20:.1f} MiB, "
          f"whole model {model / 2**20:.1f} MiB (float32)")
    assert peak < 3 * block < model
