"""The network's primitive ops in float32 numpy (docs/architecture.md sections 2-3).

Each op is written the way the network defines it, so unit tests can check them against an
independent formula and the ONNX exporter can mirror them op for op.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["timestep_sinusoid", "silu", "rms_norm", "layer_norm", "gelu", "rope_angles",
           "apply_rope", "attention", "linear"]


def linear(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """y = x @ W.T; weights are stored [out, in] and have no bias anywhere in the network.

    Leading axes are folded into one GEMM: numpy's stacked matmul would otherwise call BLAS once per
    batch row, which made a batch of 200 streams ~30x slower.
    """
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    return y.reshape(*x.shape[:-1], weight.shape[0])


def timestep_sinusoid(t: np.ndarray, dim: int) -> np.ndarray:
    """[B] timesteps -> [B, dim]: cos first, then sin; freqs exp(-ln(1e4) * k / half)."""
    half = dim // 2
    freqs = np.exp(-math.log(10000.0) * np.arange(half, dtype=np.float32) / np.float32(half))
    angle = np.asarray(t, dtype=np.float32)[:, None] * freqs[None, :].astype(np.float32)
    return np.concatenate([np.cos(angle), np.sin(angle)], axis=-1).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis with a learned scale."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True)
    return (x / np.sqrt(ms + np.float32(eps))) * weight


def layer_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis without affine parameters (the AdaLN branches)."""
    mean = np.mean(x, axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(np.square(centred), axis=-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(eps))


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, not the tanh approximation."""
    from scipy.special import erf  # here: the runtime's processes never call it, and scipy costs each ~0.4 s
    return (0.5 * x * (1.0 + erf(x / np.float32(math.sqrt(2.0))))).astype(x.dtype)


def _axis_freqs(dim: int, ratio: float) -> np.ndarray:
    # NTK-aware scaling: theta grows with the extrapolation ratio.
    theta = 10000.0 * ratio ** (dim / (dim - 2))
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def rope_angles(dims: tuple[int, int, int], ratios: tuple[float, float, float],
                grid: tuple[int, int, int]) -> np.ndarray:
    """Per-token rotation angles [T*H*W, head_dim/2] for a (t, h, w) grid, tokens w-fastest.

    The angle vector is [t-angles, h-angles, w-angles], one angle per split-half pair.
    """
    (dim_t, dim_h, dim_w), (rt, rh, rw), (nt, nh, nw) = dims, ratios, grid
    ft, fh, fw = _axis_freqs(dim_t, rt), _axis_freqs(dim_h, rh), _axis_freqs(dim_w, rw)
    t, h, w = np.meshgrid(np.arange(nt), np.arange(nh), np.arange(nw), indexing="ij")
    angles = np.concatenate([
        t.reshape(-1, 1) * ft[None], h.reshape(-1, 1) * fh[None], w.reshape(-1, 1) * fw[None],
    ], axis=1)
    return angles.astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate [..., N, heads, head_dim] with split-half pairs (k, k + head_dim/2).

    cos/sin are [N, head_dim/2] and broadcast over the heads.
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v over [B, N, heads, d] tensors; no mask."""
    q, k, v = (np.swapaxes(a, 1, 2) for a in (q, k, v))        # [B, heads, N, d]
    scores = (q @ np.swapaxes(k, -1, -2)) * np.float32(1.0 / math.sqrt(q.shape[-1]))
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.swapaxes(p @ v, 1, 2)                            # [B, N, heads, d]
