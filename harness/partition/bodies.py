"""The DiT bodies of the three subgraphs of a block (self-attention, cross-attention, FFN) as ONNX, op for op
the FP32 reference's, and the FFN's simulated INT8 (fake quantisation)."""
from __future__ import annotations

import math

import numpy as np

from ..core.errors import ConfigError
from ..model.config import ModelConfig
from ..model.reference import make_rope
from .graph import Graph, add_attention, add_heads, add_linear, add_rms_norm, add_rope
from .manifest import FAKE_QUANT


def _self_attn(g: Graph, w: dict, cfg: ModelConfig, i: int, streams: int) -> None:
    p, n, eps = f"blocks.{i}.self_attn.", cfg.tokens, cfg.norm_eps
    heads = [streams, n, cfg.heads, cfg.head_dim]
    q = add_rms_norm(g, add_heads(g, add_linear(g, "x", w, p + "q_proj.weight", "q_proj"), heads, "q_heads"),
                  w, p + "q_norm.weight", eps, "q_norm")
    k = add_rms_norm(g, add_heads(g, add_linear(g, "x", w, p + "k_proj.weight", "k_proj"), heads, "k_heads"),
                  w, p + "k_norm.weight", eps, "k_norm")
    v = add_heads(g, add_linear(g, "x", w, p + "v_proj.weight", "v_proj"), heads, "v_heads")
    rope = make_rope(cfg)
    half = cfg.head_dim // 2
    cos = g.const("rope.cos", rope.cos.reshape(n, half))    # [N, half] broadcast over S*H
    sin = g.const("rope.sin", rope.sin.reshape(n, half))
    q, k = add_rope(g, q, cos, sin, half, "q_rope"), add_rope(g, k, cos, sin, half, "k_rope")
    o = add_attention(g, q, k, v, cfg.head_dim, [streams, n, cfg.width])
    g.op("MatMul", [o, g.weight_t("output_proj.weight_t", w, p + "output_proj.weight")], "y")


def _cross_attn(g: Graph, w: dict, cfg: ModelConfig, i: int, streams: int) -> None:
    p, n, ctx, eps = f"blocks.{i}.cross_attn.", cfg.tokens, cfg.text_emb_tokens, cfg.norm_eps
    q = add_rms_norm(g, add_heads(g, add_linear(g, "x", w, p + "q_proj.weight", "q_proj"),
                            [streams, n, cfg.heads, cfg.head_dim], "q_heads"),
                  w, p + "q_norm.weight", eps, "q_norm")
    kv_heads = [streams, ctx, cfg.heads, cfg.head_dim]
    k = add_rms_norm(g, add_heads(g, add_linear(g, "text_emb", w, p + "k_proj.weight", "k_proj"), kv_heads, "k_heads"),
                  w, p + "k_norm.weight", eps, "k_norm")
    v = add_heads(g, add_linear(g, "text_emb", w, p + "v_proj.weight", "v_proj"), kv_heads, "v_heads")
    o = add_attention(g, q, k, v, cfg.head_dim, [streams, n, cfg.width])
    g.op("MatMul", [o, g.weight_t("output_proj.weight_t", w, p + "output_proj.weight")], "y")


def _int8_weights(w: dict, keys: tuple[str, ...]) -> dict:
    """Symmetric per-output-channel INT8 quantise-dequantise of the named [out, in] weights."""
    out = dict(w)
    for key in keys:
        m = np.asarray(w[key], dtype=np.float32)
        scale = np.abs(m).max(axis=1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        out[key] = np.round(m / scale) * scale
    return out


def _int8_activation(g: Graph, x: str, name: str) -> str:
    # Dynamic per-tensor symmetric INT8: round(x / s) * s with s = max|x| / 127 (|x / s| <= 127,
    # so no clip is needed). Written in primitive ops, like GELU, for opset <= 19.
    # No axes: ReduceMax over every axis, the same node in opset 13..19.
    peak = g.op("ReduceMax", [g.op("Abs", [x], f"{name}/abs")], f"{name}/max", keepdims=1)
    scale = g.op("Div", [peak, g.const(f"{name}/qmax", 127.0)], f"{name}/scale")
    q = g.op("Round", [g.op("Div", [x, scale], f"{name}/scaled")], f"{name}/q")
    return g.op("Mul", [q, scale], f"{name}/dq")


def ffn_body(g: Graph, w: dict, cfg: ModelConfig, i: int, streams: int, fake_quant: str | None = None) -> None:
    p = f"blocks.{i}.mlp."
    x = "x"
    if fake_quant == "w8a8-ffn":
        # The board's FFN W8A8 what-if: INT8 weights and activations into both FFN linears,
        # GELU and everything else at the graph dtype.
        w = _int8_weights(w, (p + "layer1.weight", p + "layer2.weight"))
        x = _int8_activation(g, x, "quant_in")
    h = add_linear(g, x, w, p + "layer1.weight", "layer1")
    # ops.gelu, exact erf form: (x * 0.5) * (erf(x / sqrt(2)) + 1). Constants second: written so,
    # rknn-toolkit2 fuses the five ops into one NPU GELU; constant-first leaves Erf on the CPU
    # (docs/architecture.md section 8). IEEE + and * commute exactly, so the values equal ops.gelu's.
    erf = g.op("Erf", [g.op("Div", [h, g.const("gelu/sqrt2", math.sqrt(2.0))], "gelu/scaled")], "gelu/erf")
    one_plus_erf = g.op("Add", [erf, g.const("gelu/one", 1.0)], "gelu/one_plus_erf")
    act = g.op("Mul", [g.op("Mul", [h, g.const("gelu/half", 0.5)], "gelu/half_x"), one_plus_erf], "gelu")
    if fake_quant == "w8a8-ffn":
        act = _int8_activation(g, act, "quant_hidden")
    g.op("MatMul", [act, g.weight_t("layer2.weight_t", w, p + "layer2.weight")], "y")


BODIES = {"self_attn": _self_attn, "cross_attn": _cross_attn, "ffn": ffn_body}


def check_fake_quant(fake_quant: str | None) -> str | None:
    if fake_quant is not None and fake_quant not in FAKE_QUANT:
        raise ConfigError(f"fake quantisation '{fake_quant}' is unknown (known: {', '.join(FAKE_QUANT)})")
    return fake_quant
