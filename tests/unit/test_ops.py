"""Each primitive op against an independent computation (scalar loops, float64, closed forms)."""
import math

import numpy as np
import pytest

from harness.model import ops

RNG = np.random.default_rng(7)


def test_timestep_sinusoid_is_cos_first_with_log_spaced_freqs():
    t = np.array([0.0, 0.73, 500.0], dtype=np.float32)
    emb = ops.timestep_sinusoid(t, 8)
    for b, tv in enumerate(t):
        for k in range(4):
            f = math.exp(-math.log(10000) * k / 4)
            assert emb[b, k] == pytest.approx(math.cos(tv * f), abs=1e-4)
            assert emb[b, 4 + k] == pytest.approx(math.sin(tv * f), abs=1e-4)


def test_rms_norm_matches_formula_in_float64():
    x = RNG.standard_normal((3, 5, 16)).astype(np.float32)
    w = RNG.standard_normal(16).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(ops.rms_norm(x, w, 1e-6), want, rtol=1e-5, atol=1e-6)


def test_layer_norm_has_no_affine_zero_mean_unit_variance():
    x = (RNG.standard_normal((4, 32)) * 5 + 3).astype(np.float32)
    y = ops.layer_norm(x, 1e-6)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-4)


def test_gelu_is_exact_erf_not_tanh():
    xs = np.linspace(-4, 4, 41).astype(np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in xs])
    tanh_approx = 0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs ** 3)))
    np.testing.assert_allclose(ops.gelu(xs), exact, atol=2e-6)
    # The two variants differ by more than our tolerance: the test tells them apart.
    assert np.abs(tanh_approx - exact).max() > 1e-4


def test_rope_thetas_are_ntk_scaled_and_position_zero_is_identity():
    dims, ratios = (8, 4, 4), (1.0, 4.0, 4.0)
    angles = ops.rope_angles(dims, ratios, (1, 3, 5))
    assert angles.shape == (15, 8)
    np.testing.assert_array_equal(angles[0], 0)
    # token (h=2, w=3): t slots 0, h slots = 2 * h-freqs, w slots = 3 * w-freqs
    theta_h = 10000 * 4.0 ** (4 / 2)
    h_freqs = [1 / theta_h ** (j / 4) for j in (0, 2)]
    tok = 2 * 5 + 3
    np.testing.assert_allclose(angles[tok, :4], 0)
    np.testing.assert_allclose(angles[tok, 4:6], [2 * f for f in h_freqs], rtol=1e-6)
    np.testing.assert_allclose(angles[tok, 6:8], [3 * f for f in h_freqs], rtol=1e-6)


def test_rope_rotates_split_half_pairs_and_preserves_norm():
    n, heads, d = 6, 2, 8
    x = RNG.standard_normal((1, n, heads, d)).astype(np.float32)
    a = RNG.uniform(-3, 3, (n, d // 2)).astype(np.float32)
    y = ops.apply_rope(x, np.cos(a), np.sin(a))
    for tok in range(n):
        for hd in range(heads):
            for k in range(d // 2):
                x1, x2, ang = x[0, tok, hd, k], x[0, tok, hd, k + d // 2], a[tok, k]
                assert y[0, tok, hd, k] == pytest.approx(x1 * math.cos(ang) - x2 * math.sin(ang), abs=1e-5)
                assert y[0, tok, hd, k + d // 2] == pytest.approx(x1 * math.sin(ang) + x2 * math.cos(ang), abs=1e-5)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_attention_matches_explicit_softmax_and_ignores_key_order():
    q = RNG.standard_normal((1, 3, 2, 4)).astype(np.float32)
    k = RNG.standard_normal((1, 5, 2, 4)).astype(np.float32)
    v = RNG.standard_normal((1, 5, 2, 4)).astype(np.float32)
    out = ops.attention(q, k, v)
    for i in range(3):
        for h in range(2):
            s = np.array([q[0, i, h] @ k[0, j, h] / 2.0 for j in range(5)], dtype=np.float64)
            p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            np.testing.assert_allclose(out[0, i, h], p @ v[0, :, h], rtol=1e-5, atol=1e-6)
    perm = RNG.permutation(5)
    np.testing.assert_allclose(ops.attention(q, k[:, perm], v[:, perm]), out, rtol=1e-5, atol=1e-6)
