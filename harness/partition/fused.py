"""A fused subgraph: one or more consecutive whole blocks, AdaLN LayerNorm, modulation and the gated
residual adds inside, the host feeding each branch's shift, scale and AdaLN gate (computed per step
from the timestep, as for the branch partition) as inputs.

Its output is the sum of the AdaLN-gated branch outputs, `delta`, not the updated stream: the host adds
it to its FP32 residual stream (x += delta). Inside the subgraph the stream is the graph's dtype
(x + the delta so far), but across subgraphs it stays the host's FP32, so a fused partition rounds
the stream once per subgraph instead of never; returning the stream itself would round the whole
residual to float16 at every subgraph boundary and lose what the host keeps.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..model.config import BRANCHES, ModelConfig

if TYPE_CHECKING:
    from .graph import Graph

# onnx and the graph builders are imported where a subgraph is built: the runtime's pipeline reads only
# MOD_PARTS and mod_input, and onnx costs every generate process ~0.5 s of CPU.

__all__ = ["MOD_PARTS", "mod_input", "input_names", "fused_inputs", "build_fused_body"]

MOD_PARTS = ("shift", "scale", "adaln_gate")


def mod_input(block: int, branch: str, part: str) -> str:
    """The graph input carrying one branch's shift, scale or AdaLN gate, [S, 1, D] (one row per
    stream, all equal: rknn-toolkit2 2.3.2 dies with SIGSEGV building a LayerNorm followed by a
    modulation of shape [1, 1, D] or [D], while [S, 1, D] builds)."""
    return f"b{block}_{branch}_{part}"


def input_names(blocks: list[int]) -> list[str]:
    """A fused subgraph's inputs in order: the stream, the text embedding, then every branch's modulations."""
    return ["x", "text_emb"] + [mod_input(b, branch, part) for b in blocks for branch in BRANCHES for part in MOD_PARTS]


def fused_inputs(g: Graph, cfg: ModelConfig, blocks: list[int], streams: int) -> list:
    from onnx import helper
    x, text_emb, *mods = input_names(blocks)
    inputs = [helper.make_tensor_value_info(x, g.elem, [streams, cfg.tokens, cfg.width]),
              helper.make_tensor_value_info(text_emb, g.elem, [streams, cfg.text_emb_tokens, cfg.text_emb_dim])]
    return inputs + [helper.make_tensor_value_info(name, g.elem, [streams, 1, cfg.width]) for name in mods]


def add_layer_norm(g: Graph, x: str, eps: float) -> str:
    # ops.layer_norm: (x - mean) / sqrt(mean((x - mean)^2) + eps), no affine
    centred = g.op("Sub", [x, g.reduce_mean_last(x, "ln/mean")], "ln/centred")
    var = g.reduce_mean_last(g.op("Mul", [centred, centred], "ln/square"), "ln/var")
    return g.op("Div", [centred, g.op("Sqrt", [g.op("Add", [var, g.const("ln/eps", eps)], "ln/add_eps")],
                                      "ln/sqrt")], "ln")


def build_fused_body(g: Graph, w: dict, cfg: ModelConfig, blocks: list[int], streams: int,
                     fake_quant: str | None) -> None:
    """Every branch of `blocks` in order, as reference.residual_stream computes them, the stream
    being x + delta; the output `y` is delta."""
    from .bodies import BODIES, ffn_body
    delta = None
    last = (blocks[-1], BRANCHES[-1])
    for block in blocks:
        for branch in BRANCHES:
            g.prefix, g.alias = f"b{block}/{branch}/", {}
            stream = "x" if delta is None else g.op("Add", ["x", delta], "stream")
            # reference.branch_input: layer_norm(x) * (1 + scale) + shift
            one_plus = g.op("Add", [g.const("one", 1.0), mod_input(block, branch, "scale")], "one_plus_scale")
            h = g.op("Add", [g.op("Mul", [add_layer_norm(g, stream, cfg.norm_eps), one_plus], "modulated"),
                             mod_input(block, branch, "shift")], "h")
            g.alias = {"x": h}
            if branch == "ffn":
                ffn_body(g, w, cfg, block, streams, fake_quant)
            else:
                BODIES[branch](g, w, cfg, block, streams)
            g.alias = {}
            gated = g.op("Mul", [mod_input(block, branch, "adaln_gate"), g.prefix + "y"], "gated")
            if (block, branch) == last:
                assert delta is not None            # the last branch follows at least two others
                g.prefix = ""
                g.op("Add", [delta, gated], "y")
            else:
                delta = gated if delta is None else g.op("Add", [delta, gated], "delta")
    g.prefix = ""
