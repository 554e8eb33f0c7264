"""The FP32 reference forward against tensors computed by the public Cosmos-Predict2 code.

tests/data/cosmos-reference holds a 2-block random model, its inputs, its output and block-0
intermediates (see its README). Matching them pins every detail of the math at once; the other
tests here pin single properties (zero gates, patch layout) that would localise a regression.
"""
from pathlib import Path

import numpy as np
import pytest

from harness.model import ops
from harness.model import reference as R
from harness.model.checkpoint import load_weights
from harness.model.config import load_profile
from harness.model.weights import random_weights

DATA = Path(__file__).resolve().parent.parent / "data" / "cosmos-reference"


@pytest.fixture(scope="module")
def tiny():
    cfg = load_profile("cosmos-tiny")
    w = load_weights(DATA / "tiny.safetensors", cfg)
    io = dict(np.load(DATA / "tiny_io.npz"))
    hooks = dict(np.load(DATA / "tiny_block0_branches.npz"))
    return cfg, w, io, hooks


def test_whole_network_reproduces_public_implementation(tiny):
    cfg, w, io, _ = tiny
    out = R.forward(w, cfg, io["x"][:, :, 0], io["timesteps"], io["text_emb"])
    ref = io["output"][:, :, 0]
    assert np.abs(out - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def test_timestep_embedding_and_lora(tiny):
    cfg, w, io, hooks = tiny
    emb, lora = R.time_embedding(w, cfg, io["timesteps"])
    np.testing.assert_allclose(ops.timestep_sinusoid(io["timesteps"], cfg.width), hooks["t_sinusoid"][:, 0], atol=1e-6)
    np.testing.assert_allclose(emb, hooks["t_embedding"][:, 0], atol=1e-5)
    np.testing.assert_allclose(lora, hooks["adaln_lora"][:, 0], atol=1e-5)


def test_patch_embed_and_rope_tables(tiny):
    cfg, w, io, hooks = tiny
    tokens = ops.linear(R.patchify(io["x"][:, :, 0], cfg), w["x_embedder.proj.1.weight"])
    np.testing.assert_allclose(tokens, hooks["x_embedder.out"].reshape(1, 16, 64), atol=1e-5)
    rope = R.make_rope(cfg)
    mats = hooks["rope_emb"]          # [L, Dh/2, 2, 2] = [[cos, -sin], [sin, cos]]
    np.testing.assert_allclose(rope.cos, mats[:, :, 0, 0], atol=1e-6)
    np.testing.assert_allclose(rope.sin, mats[:, :, 1, 0], atol=1e-6)


def test_block0_branch_inputs_and_outputs(tiny):
    cfg, w, io, hooks = tiny
    emb, lora = R.time_embedding(w, cfg, io["timesteps"])
    mods = R.modulations(w, cfg, emb, lora)
    x = hooks["block0.in_x"].reshape(1, 16, 64)
    x1, rec = R.block_branches(w, cfg, 0, x, mods, io["text_emb"], R.make_rope(cfg))
    for branch, key in (("self_attn", "self_attn"), ("cross_attn", "cross_attn"), ("ffn", "mlp")):
        h, out = rec[branch]
        np.testing.assert_allclose(h, hooks[f"block0.{key}.in_x"].reshape(1, 16, 64), atol=1e-5, err_msg=branch)
        np.testing.assert_allclose(out, hooks[f"block0.{key}.out"].reshape(1, 16, 64), atol=1e-4, err_msg=branch)
    np.testing.assert_allclose(x1, hooks["block0.out"].reshape(1, 16, 64), atol=1e-4)
    x2 = R.block_forward(w, cfg, 1, x1, mods, io["text_emb"], R.make_rope(cfg))
    np.testing.assert_allclose(x2, hooks["blocks.1.out"].reshape(1, 16, 64), atol=1e-4)


def test_modulation_chunks_are_shift_scale_gate_plus_shared_lora(tiny):
    cfg, w, io, hooks = tiny
    emb, lora = R.time_embedding(w, cfg, io["timesteps"])
    shift, scale, gate = R.modulations(w, cfg, emb, lora)[(0, "cross_attn")]
    raw = hooks["block0.adaln_modulation_cross_attn.out"][:, 0] + hooks["adaln_lora"][:, 0]
    np.testing.assert_allclose(np.concatenate([shift, scale, gate], -1), raw, atol=1e-5)


def test_block_with_zero_gates_is_identity():
    cfg = load_profile("cosmos-tiny")
    w = random_weights(cfg, seed=3)
    d = cfg.width
    for name in R.ADALN_NAMES.values():
        w[f"blocks.0.{name}.2.weight"][2 * d:] = 0.0     # gate rows of every branch
    w["t_embedder.1.linear_2.weight"][2 * d:] = 0.0        # and the shared lora's gate part
    emb, lora = R.time_embedding(w, cfg, np.array([0.5], np.float32))
    mods = R.modulations(w, cfg, emb, lora, blocks=range(1))
    x = np.random.default_rng(0).standard_normal((2, cfg.tokens, d)).astype(np.float32)
    ctx = np.random.default_rng(1).standard_normal((2, 6, cfg.text_emb_dim)).astype(np.float32)
    np.testing.assert_array_equal(R.block_forward(w, cfg, 0, x, mods, ctx, R.make_rope(cfg)), x)


def test_patchify_feature_layout_matches_the_documented_index():
    cfg = load_profile("cosmos-tiny")          # 4 channels + mask, patch 2
    lat = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    tok = R.patchify(lat, cfg)
    for (H, W, c, i, j) in [(0, 0, 0, 0, 1), (1, 2, 3, 1, 0), (3, 3, 2, 1, 1)]:
        n = H * 4 + W
        assert tok[0, n, (c * 2 + i) * 2 + j] == lat[0, c, 2 * H + i, 2 * W + j]
    assert np.all(tok[0, :, 16:] == 0)               # mask channel (c = 4) is last and zero
    # final layer output is unpacked channel-minor: feature = (i*2 + j)*C + c
    feats = np.random.default_rng(3).standard_normal((1, 16, 16)).astype(np.float32)
    lat2 = R.unpatchify(feats, cfg, (8, 8))
    for (H, W, c, i, j) in [(0, 1, 3, 0, 1), (2, 3, 1, 1, 1)]:
        assert lat2[0, c, 2 * H + i, 2 * W + j] == feats[0, H * 4 + W, (i * 2 + j) * 4 + c]


@pytest.mark.slow
def test_full_width_anima_block_runs_and_matches_float64_spot_checks(anima_block):
    """One anima-2b block at full width (2048, 16 heads, FFN 8192, 1024 tokens) in CI time."""
    cfg, w, _ = anima_block
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, cfg.tokens, cfg.width)).astype(np.float32)
    ctx = rng.standard_normal((1, 16, cfg.text_emb_dim)).astype(np.float32)
    emb, lora = R.time_embedding(w, cfg, np.array([0.6], np.float32))
    mods = R.modulations(w, cfg, emb, lora, blocks=range(1))
    out, rec = R.block_branches(w, cfg, 0, x, mods, ctx, R.make_rope(cfg))
    assert out.shape == x.shape and np.isfinite(out).all()
    # Independent float64 recomputation of a few tokens of the FFN and self-attention branches.
    h, y = rec["ffn"]
    h64 = h[0, :4].astype(np.float64)
    a = h64 @ w["blocks.0.mlp.layer1.weight"].T.astype(np.float64)
    from scipy.special import erf
    want = (0.5 * a * (1 + erf(a / np.sqrt(2)))) @ w["blocks.0.mlp.layer2.weight"].T.astype(np.float64)
    np.testing.assert_allclose(y[0, :4], want, rtol=1e-3, atol=1e-3)
    h, y = rec["self_attn"]
    p = {k: w[f"blocks.0.self_attn.{k}.weight"].astype(np.float64) for k in
         ("q_proj", "k_proj", "v_proj", "output_proj", "q_norm", "k_norm")}
    h64 = h[0].astype(np.float64)
    rope = R.make_rope(cfg)

    def heads(m, norm):
        m = m.reshape(cfg.tokens, cfg.heads, cfg.head_dim)
        m = m / np.sqrt((m ** 2).mean(-1, keepdims=True) + 1e-6) * p[norm]
        half = cfg.head_dim // 2
        c, s = rope.cos[:, None].astype(np.float64), rope.sin[:, None].astype(np.float64)
        return np.concatenate([m[..., :half] * c - m[..., half:] * s, m[..., :half] * s + m[..., half:] * c], -1)

    q, k = heads(h64 @ p["q_proj"].T, "q_norm"), heads(h64 @ p["k_proj"].T, "k_norm")
    v = (h64 @ p["v_proj"].T).reshape(cfg.tokens, cfg.heads, cfg.head_dim)
    rows = [0, 517, 1023]
    s = np.einsum("qhd,khd->hqk", q[rows], k) / np.sqrt(cfg.head_dim)
    prob = np.exp(s - s.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    o = np.einsum("hqk,khd->qhd", prob, v).reshape(len(rows), cfg.width) @ p["output_proj"].T
    np.testing.assert_allclose(y[0, rows], o, rtol=1e-3, atol=1e-3)
