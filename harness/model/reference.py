"""The FP32 reference forward of the Cosmos-Predict2 DiT, monolithic (no partition).

Split the way the board splits it: the *host* parts (timestep embedding, AdaLN modulation, LayerNorm,
gates, FP32 residual, patch embed, final layer) and the three *branch bodies* that become NPU
subgraphs (self-attention, cross-attention, FFN). The partitioned pipeline calls the host parts from
here and runs the bodies through a backend, so both paths share one definition of the math.

Shapes: latents [B, C, H, W] (image case, T = 1); tokens [B, N, D] in (h, w) order, w fastest;
text_emb [B, L, text_emb_dim].
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import ops
from .config import BRANCHES, ModelConfig

__all__ = ["make_rope", "time_embedding", "modulations", "patchify", "unpatchify", "branch_input",
           "self_attn_body", "branch_body", "residual_stream", "block_forward", "block_branches", "forward",
           "forward_features", "final_layer", "ADALN_NAMES"]

# Checkpoint module name of each branch's AdaLN MLP.
ADALN_NAMES = {"self_attn": "adaln_modulation_self_attn", "cross_attn": "adaln_modulation_cross_attn",
               "ffn": "adaln_modulation_mlp"}


@dataclass(frozen=True)
class Rope:
    cos: np.ndarray   # [N, head_dim/2]
    sin: np.ndarray


def make_rope(cfg: ModelConfig, latent_hw: tuple[int, int] | None = None) -> Rope:
    h, w = latent_hw or cfg.latent_size
    grid = (1, h // cfg.patch_spatial, w // cfg.patch_spatial)
    ratios = (cfg.rope_ratio_t, cfg.rope_ratio_h, cfg.rope_ratio_w)
    angles = ops.rope_angles(cfg.rope_dims, ratios, grid)
    return Rope(np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))


# ---------------------------------------------------------------- host: timestep and modulation

def time_embedding(w: Mapping, cfg: ModelConfig, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sigma [B] -> (emb [B, D], adaln_lora [B, 3D]); the timestep fed is sigma x multiplier."""
    t = np.asarray(sigma, dtype=np.float32) * np.float32(cfg.timestep_multiplier)
    sin = ops.timestep_sinusoid(t, cfg.width)
    lora = ops.linear(ops.silu(ops.linear(sin, w["t_embedder.1.linear_1.weight"])),
                      w["t_embedder.1.linear_2.weight"])
    # The blocks see the RMSNorm'd raw sinusoid, not the MLP output.
    emb = ops.rms_norm(sin, w["t_embedding_norm.weight"], cfg.norm_eps)
    return emb, lora


def modulations(w: Mapping, cfg: ModelConfig, emb: np.ndarray, lora: np.ndarray,
                blocks: range | None = None) -> dict[tuple[int, str], tuple[np.ndarray, ...]]:
    """{(block, branch): (shift, scale, adaln_gate)}, each [B, D]. Depends on t only: once per step."""
    act = ops.silu(emb)
    out = {}
    for i in blocks if blocks is not None else range(cfg.blocks):
        for branch in BRANCHES:
            name = f"blocks.{i}.{ADALN_NAMES[branch]}"
            m = ops.linear(ops.linear(act, w[f"{name}.1.weight"]), w[f"{name}.2.weight"]) + lora
            out[(i, branch)] = tuple(np.split(m, 3, axis=-1))
    return out


def final_modulation(w: Mapping, cfg: ModelConfig, emb: np.ndarray, lora: np.ndarray):
    m = ops.linear(ops.linear(ops.silu(emb), w["final_layer.adaln_modulation.1.weight"]),
                   w["final_layer.adaln_modulation.2.weight"]) + lora[:, : 2 * cfg.width]
    shift, scale = np.split(m, 2, axis=-1)
    return shift, scale


# ---------------------------------------------------------------- host: patchify

def patchify(latent: np.ndarray, cfg: ModelConfig) -> np.ndarray:
    """[B, C, H, W] -> [B, N, (C+mask)*p*p], zero mask channel appended last, channel-major features."""
    b, c, h, w = latent.shape
    p = cfg.patch_spatial
    x = latent
    if cfg.padding_mask:
        x = np.concatenate([x, np.zeros((b, 1, h, w), dtype=x.dtype)], axis=1)
    c_in = x.shape[1]
    x = x.reshape(b, c_in, h // p, p, w // p, p)            # b c H i W j
    x = x.transpose(0, 2, 4, 1, 3, 5)                        # b H W c i j
    return x.reshape(b, (h // p) * (w // p), c_in * p * p).astype(np.float32)


def unpatchify(tokens: np.ndarray, cfg: ModelConfig, latent_hw: tuple[int, int]) -> np.ndarray:
    """[B, N, p*p*C] (channel-minor: feature = (i*p + j)*C + c) -> [B, C, H, W]."""
    b = tokens.shape[0]
    h, w = latent_hw
    p, c = cfg.patch_spatial, cfg.latent_channels
    x = tokens.reshape(b, h // p, w // p, p, p, c)           # b H W i j c
    x = x.transpose(0, 5, 1, 3, 2, 4)                        # b c H i W j
    return x.reshape(b, c, h, w)


# ---------------------------------------------------------------- host: AdaLN in, AdaLN gate out

def branch_input(x: np.ndarray, shift: np.ndarray, scale: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm (no affine) then modulation: what a branch subgraph receives."""
    return ops.layer_norm(x, eps) * (1.0 + scale[:, None, :]) + shift[:, None, :]


# ---------------------------------------------------------------- the three subgraph bodies

def _heads(x: np.ndarray, cfg: ModelConfig) -> np.ndarray:
    return x.reshape(x.shape[0], x.shape[1], cfg.heads, cfg.head_dim)


def self_attn_body(w: dict, cfg: ModelConfig, i: int, h: np.ndarray, rope: Rope) -> np.ndarray:
    p = f"blocks.{i}.self_attn."
    q = ops.rms_norm(_heads(ops.linear(h, w[p + "q_proj.weight"]), cfg), w[p + "q_norm.weight"], cfg.norm_eps)
    k = ops.rms_norm(_heads(ops.linear(h, w[p + "k_proj.weight"]), cfg), w[p + "k_norm.weight"], cfg.norm_eps)
    v = _heads(ops.linear(h, w[p + "v_proj.weight"]), cfg)
    q, k = ops.apply_rope(q, rope.cos, rope.sin), ops.apply_rope(k, rope.cos, rope.sin)
    o = ops.attention(q, k, v).reshape(h.shape)
    return ops.linear(o, w[p + "output_proj.weight"])


def cross_attn_body(w: dict, cfg: ModelConfig, i: int, h: np.ndarray, text_emb: np.ndarray) -> np.ndarray:
    p = f"blocks.{i}.cross_attn."
    q = ops.rms_norm(_heads(ops.linear(h, w[p + "q_proj.weight"]), cfg), w[p + "q_norm.weight"], cfg.norm_eps)
    k = ops.rms_norm(_heads(ops.linear(text_emb, w[p + "k_proj.weight"]), cfg), w[p + "k_norm.weight"], cfg.norm_eps)
    v = _heads(ops.linear(text_emb, w[p + "v_proj.weight"]), cfg)
    o = ops.attention(q, k, v).reshape(h.shape)
    return ops.linear(o, w[p + "output_proj.weight"])


def ffn_body(w: dict, cfg: ModelConfig, i: int, h: np.ndarray) -> np.ndarray:
    p = f"blocks.{i}.mlp."
    return ops.linear(ops.gelu(ops.linear(h, w[p + "layer1.weight"])), w[p + "layer2.weight"])


def branch_body(w: dict, cfg: ModelConfig, i: int, branch: str, h: np.ndarray,
                text_emb: np.ndarray, rope: Rope) -> np.ndarray:
    if branch == "self_attn":
        return self_attn_body(w, cfg, i, h, rope)
    if branch == "cross_attn":
        return cross_attn_body(w, cfg, i, h, text_emb)
    return ffn_body(w, cfg, i, h)


# ---------------------------------------------------------------- blocks and the whole network

def _untimed(category: str):
    return contextlib.nullcontext()


def residual_stream(x: np.ndarray, mods: dict, eps: float, branches: Iterable[tuple[int, str, Any]],
                    body: Callable[[Any, np.ndarray], np.ndarray], timed=_untimed) -> np.ndarray:
    """The FP32 residual stream through `branches` ((block, branch, item) in execution order): AdaLN
    in, `body(item, h)`, then the AdaLN gate and the residual add.

    The one loop both paths share: the reference passes numpy branch bodies, the partitioned pipeline
    invocations of the subgraphs (and a timer for its host math).
    """
    for block, branch, item in branches:
        shift, scale, adaln_gate = mods[(block, branch)]
        with timed("adaln"):
            h = branch_input(x, shift, scale, eps)
        out = body(item, h)
        with timed("residual"):
            x = x + adaln_gate[:, None, :] * out
    return x


def block_branches(w: dict, cfg: ModelConfig, i: int, x: np.ndarray, mods: dict,
                   text_emb: np.ndarray, rope: Rope) -> tuple[np.ndarray, dict]:
    """One block with every branch's input and output kept: {branch: (input, output)}.

    The partitioned pipeline is checked against these, branch by branch.
    """
    record = {}

    def body(branch: str, h: np.ndarray) -> np.ndarray:
        record[branch] = (h, branch_body(w, cfg, i, branch, h, text_emb, rope))
        return record[branch][1]

    x = residual_stream(x, mods, cfg.norm_eps, [(i, b, b) for b in BRANCHES], body)
    return x, record


def block_forward(w, cfg, i, x, mods, text_emb, rope) -> np.ndarray:
    return block_branches(w, cfg, i, x, mods, text_emb, rope)[0]


def final_layer(w: Mapping, cfg: ModelConfig, x: np.ndarray, emb: np.ndarray, lora: np.ndarray,
                latent_hw: tuple[int, int]) -> np.ndarray:
    shift, scale = final_modulation(w, cfg, emb, lora)
    h = branch_input(x, shift, scale, cfg.norm_eps)
    return unpatchify(ops.linear(h, w["final_layer.linear.weight"]), cfg, latent_hw)


def forward_features(w: Mapping, cfg: ModelConfig, latent: np.ndarray, sigma: np.ndarray,
                     text_emb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hidden state after the last block, plus (emb, lora) for the final layer."""
    latent = np.asarray(latent, dtype=np.float32)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float32), (latent.shape[0],))
    emb, lora = time_embedding(w, cfg, sigma)
    mods = modulations(w, cfg, emb, lora)
    rope = make_rope(cfg, latent.shape[-2:])
    x = ops.linear(patchify(latent, cfg), w["x_embedder.proj.1.weight"])
    for i in range(cfg.blocks):
        x = block_forward(w, cfg, i, x, mods, text_emb, rope)
    return x, emb, lora


def forward(w: dict, cfg: ModelConfig, latent: np.ndarray, sigma: np.ndarray,
            text_emb: np.ndarray) -> np.ndarray:
    """Velocity [B, C, H, W] for latents [B, C, H, W] at noise level sigma ([B] or scalar)."""
    x, emb, lora = forward_features(w, cfg, latent, sigma, text_emb)
    return final_layer(w, cfg, x, emb, lora, latent.shape[-2:])
