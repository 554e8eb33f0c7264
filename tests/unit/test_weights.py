"""Weights loading: every key and shape validated, the first problem named."""
import numpy as np
import pytest
from safetensors.numpy import save_file

from harness.core.errors import WeightsError
from harness.model.checkpoint import load_weights
from harness.model.config import load_profile
from harness.model.weights import expected_shapes, random_weights


@pytest.fixture
def cfg():
    return load_profile("cosmos-tiny")


def _write(path, tensors):
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))
    return path


def test_anima_profile_has_the_public_layout():
    shapes = expected_shapes(load_profile("anima-2b"))
    assert shapes["x_embedder.proj.1.weight"] == (2048, 68)
    assert shapes["blocks.27.cross_attn.k_proj.weight"] == (2048, 1024)
    assert shapes["blocks.0.mlp.layer1.weight"] == (8192, 2048)
    assert shapes["blocks.3.adaln_modulation_mlp.2.weight"] == (6144, 256)
    assert shapes["final_layer.linear.weight"] == (64, 2048)
    assert len(shapes) == 4 + 28 * 20 + 3     # per block: 6 self, 6 cross, 2 mlp, 6 adaln


def test_round_trip_and_net_prefix(tmp_path, cfg):
    w = random_weights(cfg, seed=1)
    loaded = load_weights(_write(tmp_path / "w.safetensors", {"net." + k: v for k, v in w.items()}), cfg)
    assert set(loaded) == set(w)
    np.testing.assert_array_equal(loaded["blocks.1.mlp.layer2.weight"], w["blocks.1.mlp.layer2.weight"])


@pytest.mark.parametrize("damage,message", [
    (lambda w: w.pop("blocks.1.cross_attn.k_norm.weight"), "missing tensor 'blocks.1.cross_attn.k_norm.weight'"),
    (lambda w: w.__setitem__("blocks.0.mlp.layer1.weight", np.zeros((8, 64), np.float32)),
     "'blocks.0.mlp.layer1.weight' has shape [8, 64]"),
    (lambda w: w["t_embedding_norm.weight"].__setitem__(3, np.nan), "'t_embedding_norm.weight' has 1 non-finite"),
    (lambda w: w.__setitem__("blocks.9.mlp.layer1.weight", np.zeros((2, 2), np.float32)),
     "unexpected tensor 'blocks.9"),
])
def test_bad_weights_name_the_first_problem(tmp_path, cfg, damage, message):
    w = random_weights(cfg, seed=1)
    damage(w)
    with pytest.raises(WeightsError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        load_weights(_write(tmp_path / "w.safetensors", w), cfg)
    assert "w.safetensors" in str(err.value)


def test_not_a_safetensors_file(tmp_path, cfg):
    bad = tmp_path / "w.safetensors"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(WeightsError, match="not a readable safetensors file"):
        load_weights(bad, cfg)
    with pytest.raises(WeightsError, match="not found"):
        load_weights(tmp_path / "absent.safetensors", cfg)
