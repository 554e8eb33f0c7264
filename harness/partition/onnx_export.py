"""ONNX export of the partition: one model per (block, branch) body, plus the decoder.

Each graph mirrors harness.model.reference op for op (same operand order, same constants), so the
onnxruntime backend and the RKNN converter see exactly the math the FP32 reference defines. Shapes are
static: x [S, N, D] (S = CFG streams served per run), cross-attention also context [S, L, C]; output
y [S, N, D]. Opset <= 19 because the RKNN converter rejects newer, hence GELU is written in primitive ops.

Float16 export keeps weights and graph inputs/outputs in float16. onnxruntime's CPU provider lacks
float16 kernels for many ops; it would silently wrap them in casts. We probe which ones (per op type,
on the installed onnxruntime) and insert explicit Cast-to-float32 around exactly those nodes, so every
op output is still rounded to float16 like on the NPU, and the manifest lists them as `fp32_islands`.
"""
from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..core.atomic import atomic_write_bytes
from ..model.checkpoint import as_source
from ..model.config import BRANCHES, ModelConfig
from ..core.errors import ConfigError, WeightsError
from ..model.embedded import interp_matrix
from ..model.reference import make_rope
from ..model.weights import combine_digests, tensor_digest
from .manifest import (FORMAT, Manifest, SubgraphEntry, TensorSpec, manifest_path, network_settings,
                       subgraph_index)

__all__ = ["export_partition", "build_subgraph", "build_decoder", "fp16_missing_kernels",
           "subgraph_file", "check_opset", "planned_files", "DTYPES", "DEFAULT_OPSET",
           "MIN_OPSET", "MAX_OPSET", "DECODER_FILE"]

DTYPES = {"float32": (np.float32, TensorProto.FLOAT), "float16": (np.float16, TensorProto.FLOAT16)}
DEFAULT_OPSET = 17
MAX_OPSET = 19      # rknn-toolkit2 refuses newer opsets
MIN_OPSET = 13      # Softmax over one axis (not flattened) needs 13+
DECODER_FILE = "decoder.onnx"

# Op types used for arithmetic; everything else in these graphs only moves data.
_COMPUTE_OPS = ("MatMul", "Add", "Sub", "Mul", "Div", "Sqrt", "Erf", "Softmax", "ReduceMean",
                "Abs", "ReduceMax", "Round")
# Fake quantisation variants an export can simulate (what-if analysis before converting for INT8).
FAKE_QUANT = ("ffn-w8a8",)


def check_opset(opset: int) -> int:
    if not isinstance(opset, int) or isinstance(opset, bool):
        raise ConfigError(f"opset must be a whole number, got {opset!r}")
    if opset > MAX_OPSET:
        raise ConfigError(f"opset {opset} is too new: the RKNN converter accepts opset <= {MAX_OPSET}")
    if opset < MIN_OPSET:
        raise ConfigError(f"opset {opset} is too old: the exported graphs need opset >= {MIN_OPSET}")
    return opset


def _check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype '{dtype}' is not supported (choose {' or '.join(DTYPES)})")
    return dtype


def _check_streams(streams: int) -> int:
    if not isinstance(streams, int) or isinstance(streams, bool) or streams <= 0:
        raise ConfigError(f"streams must be a positive whole number, got {streams!r}")
    return streams


# ---------------------------------------------------------------- float16 kernel probe

def _probe_model(op_type: str, opset: int) -> onnx.ModelProto:
    f16 = TensorProto.FLOAT16
    shapes = {"MatMul": ([2, 4, 8], [8, 8])}.get(op_type, ([2, 4, 8], [2, 4, 8])
                                                   if op_type in ("Add", "Sub", "Mul", "Div") else ([2, 4, 8],))
    inputs = [helper.make_tensor_value_info(f"in{k}", f16, s) for k, s in enumerate(shapes)]
    names, inits, attrs = [i.name for i in inputs], [], {}
    if op_type == "Softmax":
        attrs["axis"] = -1
    if op_type == "ReduceMean":
        if opset >= 18:
            inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
            names.append("axes")
        else:
            attrs["axes"] = [-1]
    node = helper.make_node(op_type, names, ["out"], name="probe", **attrs)
    graph = helper.make_graph([node], "probe", inputs,
                              [helper.make_tensor_value_info("out", f16, None)], initializer=inits)
    return _finish_model(graph, opset)


@functools.lru_cache(maxsize=None)
def _lacks_fp16_kernel(op_type: str, opset: int) -> bool:
    # onnxruntime's CPU provider wraps any node without a float16 kernel in Cast nodes (even with
    # optimisations off); a Cast appearing in the saved session graph is how we see it.
    import tempfile
    import onnxruntime as ort
    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.optimized_model_filepath = str(Path(tmp) / "probe.onnx")
        ort.InferenceSession(_probe_model(op_type, opset).SerializeToString(), opts,
                             providers=["CPUExecutionProvider"])
        session_graph = onnx.load(opts.optimized_model_filepath).graph
    return any(n.op_type == "Cast" for n in session_graph.node)


def fp16_missing_kernels(opset: int = DEFAULT_OPSET) -> frozenset[str]:
    """Op types used by the export that onnxruntime's CPU provider cannot run in float16 here."""
    check_opset(opset)
    return frozenset(op for op in _COMPUTE_OPS if _lacks_fp16_kernel(op, opset))


# ---------------------------------------------------------------- graph builder

def _finish_model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="harness.partition")
    # The oldest IR that carries this opset, so older converters (onnx <= 1.18) can read the file.
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


class _Graph:
    """Nodes and initializers of one subgraph; float16 islands are wrapped here, in one place."""

    def __init__(self, dtype: str, opset: int):
        self.np_dtype, self.elem = DTYPES[dtype]
        self.opset = opset
        self.fp16 = dtype == "float16"
        self.missing = fp16_missing_kernels(opset) if self.fp16 else frozenset()
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.int_names: set[str] = set()
        self.islands: list[str] = []
        self.fp32_of: dict[str, str] = {}

    def const(self, name: str, value, source: str | None = None) -> str:
        """A float constant in the graph dtype; float16 overflow is a weights error naming `source`."""
        with np.errstate(over="ignore"):        # overflow is checked just below, with the key named
            array = np.asarray(np.asarray(value, dtype=np.float32), dtype=self.np_dtype)
        if not np.all(np.isfinite(array)):
            raise WeightsError(f"'{source or name}' does not fit in {np.dtype(self.np_dtype).name} "
                               f"(largest magnitude {float(np.max(np.abs(value))):.4g})")
        # A scalar stays rank 0 (np.ascontiguousarray would make it [1]): rknn-toolkit2's constant
        # folding refuses Clip bounds that are not rank-0 ("min should be a scalar").
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array) if array.ndim else array, name))
        return name

    def ints(self, name: str, values) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        self.int_names.add(name)
        return name

    def weight_t(self, name: str, w: dict, key: str) -> str:
        """Weights are stored [out, in]; MatMul wants [in, out]."""
        if key not in w:
            raise WeightsError(f"weights have no '{key}' (needed by the '{name}' subgraph node)")
        return self.const(name, np.ascontiguousarray(np.asarray(w[key], dtype=np.float32).T), source=key)

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        if op_type not in self.missing:
            self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
            return name
        f32 = []
        for src in inputs:
            if src in self.int_names:
                f32.append(src)
                continue
            if src not in self.fp32_of:     # one Cast per tensor, however many islands read it
                cast = f"{src}/fp32"
                self.nodes.append(helper.make_node("Cast", [src], [cast], name=cast, to=TensorProto.FLOAT))
                self.fp32_of[src] = cast
            f32.append(self.fp32_of[src])
        self.nodes.append(helper.make_node(op_type, f32, [f"{name}/island"], name=name, **attrs))
        self.nodes.append(helper.make_node("Cast", [f"{name}/island"], [name], name=f"{name}/fp16",
                                           to=TensorProto.FLOAT16))
        self.islands.append(name)
        return name

    def reduce_mean_last(self, x: str, name: str) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", [x, self.ints(f"{name}/axes", [-1])], name, keepdims=1)
        return self.op("ReduceMean", [x], name, axes=[-1], keepdims=1)

    def model(self, graph_name: str, inputs, outputs, doc: str, meta: dict) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, initializer=self.inits)
        model = _finish_model(graph, self.opset)
        model.doc_string = doc
        helper.set_model_props(model, {k: str(v) for k, v in meta.items()})
        return model


# ---------------------------------------------------------------- the bodies, op for op

def _linear(g: _Graph, x: str, w: dict, key: str, name: str) -> str:
    return g.op("MatMul", [x, g.weight_t(f"{name}.weight_t", w, key)], name)


def _rms_norm(g: _Graph, x: str, w: dict, key: str, eps: float, name: str) -> str:
    # ops.rms_norm: (x / sqrt(mean(x^2) + eps)) * weight
    sq = g.op("Mul", [x, x], f"{name}/square")
    ms = g.reduce_mean_last(sq, f"{name}/mean")
    rms = g.op("Sqrt", [g.op("Add", [ms, g.const(f"{name}/eps", eps)], f"{name}/add_eps")], f"{name}/sqrt")
    normed = g.op("Div", [x, rms], f"{name}/div")
    if key not in w:
        raise WeightsError(f"weights have no '{key}' (needed by the '{name}' subgraph node)")
    return g.op("Mul", [normed, g.const(f"{name}.weight", w[key], source=key)], name)


def _heads(g: _Graph, x: str, shape: list[int], name: str) -> str:
    return g.op("Reshape", [x, g.ints(f"{name}/shape", shape)], name)


def _rope(g: _Graph, x: str, cos: str, sin: str, half: int, name: str) -> str:
    # ops.apply_rope: split-half pairs (k, k + half); cos/sin [N, 1, half] broadcast over heads.
    axis = g.ints(f"{name}/axis", [-1])
    x1 = g.op("Slice", [x, g.ints(f"{name}/s0", [0]), g.ints(f"{name}/e0", [half]), axis], f"{name}/x1")
    x2 = g.op("Slice", [x, g.ints(f"{name}/s1", [half]), g.ints(f"{name}/e1", [2 * half]), axis], f"{name}/x2")
    lo = g.op("Sub", [g.op("Mul", [x1, cos], f"{name}/x1cos"), g.op("Mul", [x2, sin], f"{name}/x2sin")],
              f"{name}/lo")
    hi = g.op("Add", [g.op("Mul", [x1, sin], f"{name}/x1sin"), g.op("Mul", [x2, cos], f"{name}/x2cos")],
              f"{name}/hi")
    return g.op("Concat", [lo, hi], name, axis=-1)


def _attention(g: _Graph, q: str, k: str, v: str, head_dim: int, out_shape: list[int]) -> str:
    # ops.attention: softmax((q k^T) * 1/sqrt(d)) v over [S, heads, N, d]
    qt = g.op("Transpose", [q], "attn/q_t", perm=[0, 2, 1, 3])
    kt = g.op("Transpose", [k], "attn/k_t", perm=[0, 2, 3, 1])
    vt = g.op("Transpose", [v], "attn/v_t", perm=[0, 2, 1, 3])
    scores = g.op("Mul", [g.op("MatMul", [qt, kt], "attn/qk"),
                          g.const("attn/scale", 1.0 / math.sqrt(head_dim))], "attn/scores")
    probs = g.op("Softmax", [scores], "attn/softmax", axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [probs, vt], "attn/pv")], "attn/o", perm=[0, 2, 1, 3])
    return g.op("Reshape", [o, g.ints("attn/merge_shape", out_shape)], "attn/merge")


def _self_attn(g: _Graph, w: dict, cfg: ModelConfig, i: int, streams: int) -> None:
    p, n, eps = f"blocks.{i}.self_attn.", cfg.tokens, cfg.norm_eps
    heads = [streams, n, cfg.heads, cfg.head_dim]
    q = _rms_norm(g, _heads(g, _linear(g, "x", w, p + "q_proj.weight", "q_proj"), heads, "q_heads"),
                  w, p + "q_norm.weight", eps, "q_norm")
    k = _rms_norm(g, _heads(g, _linear(g, "x", w, p + "k_proj.weight", "k_proj"), heads, "k_heads"),
                  w, p + "k_norm.weight", eps, "k_norm")
    v = _heads(g, _linear(g, "x", w, p + "v_proj.weight", "v_proj"), heads, "v_heads")
    rope = make_rope(cfg)
    half = cfg.head_dim // 2
    cos = g.const("rope.cos", rope.cos.reshape(n, 1, half))
    sin = g.const("rope.sin", rope.sin.reshape(n, 1, half))
    q, k = _rope(g, q, cos, sin, half, "q_rope"), _rope(g, k, cos, sin, half, "k_rope")
    o = _attention(g, q, k, v, cfg.head_dim, [streams, n, cfg.width])
    g.op("MatMul", [o, g.weight_t("output_proj.weight_t", w, p + "output_proj.weight")], "y")


def _cross_attn(g: _Graph, w: dict, cfg: ModelConfig, i: int, streams: int) -> None:
    p, n, ctx, eps = f"blocks.{i}.cross_attn.", cfg.tokens, cfg.context_tokens, cfg.norm_eps
    q = _rms_norm(g, _heads(g, _linear(g, "x", w, p + "q_proj.weight", "q_proj"),
                            [streams, n, cfg.heads, cfg.head_dim], "q_heads"),
                  w, p + "q_norm.weight", eps, "q_norm")
    kv_heads = [streams, ctx, cfg.heads, cfg.head_dim]
    k = _rms_norm(g, _heads(g, _linear(g, "context", w, p + "k_proj.weight", "k_proj"), kv_heads, "k_heads"),
                  w, p + "k_norm.weight", eps, "k_norm")
    v = _heads(g, _linear(g, "context", w, p + "v_proj.weight", "v_proj"), kv_heads, "v_heads")
    o = _attention(g, q, k, v, cfg.head_dim, [streams, n, cfg.width])
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


def _int8_activation(g: _Graph, x: str, name: str) -> str:
    # Dynamic per-tensor symmetric INT8: round(x / s) * s with s = max|x| / 127 (|x / s| <= 127,
    # so no clip is needed). Written in primitive ops, like GELU, for opset <= 19.
    # No axes: ReduceMax over every axis, the same node in opset 13..19.
    peak = g.op("ReduceMax", [g.op("Abs", [x], f"{name}/abs")], f"{name}/max", keepdims=1)
    scale = g.op("Div", [peak, g.const(f"{name}/qmax", 127.0)], f"{name}/scale")
    q = g.op("Round", [g.op("Div", [x, scale], f"{name}/scaled")], f"{name}/q")
    return g.op("Mul", [q, scale], f"{name}/dq")


def _ffn(g: _Graph, w: dict, cfg: ModelConfig, i: int, streams: int, fake_quant: str | None = None) -> None:
    p = f"blocks.{i}.mlp."
    x = "x"
    if fake_quant == "ffn-w8a8":
        # The board's FFN W8A8 what-if: INT8 weights and activations into both FFN linears,
        # GELU and everything else at the graph dtype.
        w = _int8_weights(w, (p + "layer1.weight", p + "layer2.weight"))
        x = _int8_activation(g, x, "quant_in")
    h = _linear(g, x, w, p + "layer1.weight", "layer1")
    # ops.gelu, exact erf form: (x * 0.5) * (erf(x / sqrt(2)) + 1). Constants second: written so,
    # rknn-toolkit2 fuses the five ops into one NPU GELU; constant-first leaves Erf on the CPU
    # (docs/architecture.md section 8). IEEE + and * commute exactly, so the values equal ops.gelu's.
    erf = g.op("Erf", [g.op("Div", [h, g.const("gelu/sqrt2", math.sqrt(2.0))], "gelu/scaled")], "gelu/erf")
    gate = g.op("Add", [erf, g.const("gelu/one", 1.0)], "gelu/one_plus_erf")
    act = g.op("Mul", [g.op("Mul", [h, g.const("gelu/half", 0.5)], "gelu/half_x"), gate], "gelu")
    if fake_quant == "ffn-w8a8":
        act = _int8_activation(g, act, "quant_hidden")
    g.op("MatMul", [act, g.weight_t("layer2.weight_t", w, p + "layer2.weight")], "y")


_BODIES = {"self_attn": _self_attn, "cross_attn": _cross_attn, "ffn": _ffn}


def _check_block(cfg: ModelConfig, block: int) -> int:
    if not isinstance(block, (int, np.integer)) or not 0 <= int(block) < cfg.blocks:
        raise ConfigError(f"block {block!r} is out of range: {cfg.name} has blocks 0..{cfg.blocks - 1}")
    return int(block)


def _check_fake_quant(fake_quant: str | None) -> str | None:
    if fake_quant is not None and fake_quant not in FAKE_QUANT:
        raise ConfigError(f"fake quantisation '{fake_quant}' is unknown (known: {', '.join(FAKE_QUANT)})")
    return fake_quant


def _build(weights: dict, cfg: ModelConfig, block: int, branch: str, dtype: str, streams: int,
           opset: int, fake_quant: str | None = None) -> tuple[onnx.ModelProto, list[str]]:
    block = _check_block(cfg, block)
    if branch not in _BODIES:
        raise ConfigError(f"branch '{branch}' is unknown (known: {', '.join(BRANCHES)})")
    g = _Graph(_check_dtype(dtype), check_opset(opset))
    _check_streams(streams)
    x_shape = [streams, cfg.tokens, cfg.width]
    inputs = [helper.make_tensor_value_info("x", g.elem, x_shape)]
    if branch == "cross_attn":
        inputs.append(helper.make_tensor_value_info("context", g.elem,
                                                    [streams, cfg.context_tokens, cfg.context_dim]))
    if branch == "ffn":
        _ffn(g, weights, cfg, block, streams, _check_fake_quant(fake_quant))
    else:
        _BODIES[branch](g, weights, cfg, block, streams)
    outputs = [helper.make_tensor_value_info("y", g.elem, x_shape)]
    index = subgraph_index(block, branch)
    model = g.model(f"block{block}_{branch}", inputs, outputs,
                    f"{cfg.name} subgraph {index}: block {block} {branch} body ({dtype})",
                    {"model": cfg.name, "block": block, "branch": branch, "index": index, "dtype": dtype})
    return model, g.islands


def build_subgraph(weights: dict, cfg: ModelConfig, block: int, branch: str, dtype: str = "float32",
                   streams: int = 2, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The ONNX model of one branch body of one block (inputs x [, context], output y)."""
    return _build(weights, cfg, block, branch, dtype, streams, opset)[0]


def build_decoder(cfg: ModelConfig, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """embedded.decode as a graph: latent [1, 1, H, W] -> image [1, H*s, W*s, 3] float32."""
    check_opset(opset)
    if cfg.latent_channels != 1 or not cfg.decoder:
        raise ConfigError(f"{cfg.name}: no exportable decoder (needs a [decoder] table and a "
                          f"1-channel latent; has {cfg.latent_channels} channels)")
    scale = int(cfg.decoder.get("scale", 4))
    bg = np.asarray(cfg.decoder.get("background", [0, 0, 0]), dtype=np.float32)
    fg = np.asarray(cfg.decoder.get("foreground", [1, 1, 1]), dtype=np.float32)
    h, w = cfg.latent_size
    g = _Graph("float32", opset)
    lat = g.op("Reshape", ["latent", g.ints("latent/shape", [h, w])], "latent_2d")
    rows = g.op("MatMul", [g.const("interp_h", interp_matrix(h, scale)), lat], "upsample_h")
    up = g.op("MatMul", [rows, g.const("interp_w_t", interp_matrix(w, scale).T.copy())], "upsample_w")
    # (up + 1) * 0.5 clipped to [0, 1], then bg + level * (fg - bg)
    level = g.op("Mul", [g.op("Add", [up, g.const("one", 1.0)], "shift"), g.const("half", 0.5)], "level_raw")
    level = g.op("Clip", [level, g.const("zero_f", 0.0), g.const("one_f", 1.0)], "level_clip")
    # NHWC with a batch axis of 1: the toolkit keeps every op of this layout on the NPU, while a
    # final reshape to the rank-3 [H, W, 3] runs on the CPU (its layer table shows it). The host drops
    # the batch axis (PartitionedPipeline.decode).
    level = g.op("Reshape", [level, g.ints("level/shape", [1, h * scale, w * scale, 1])], "level")
    mixed = g.op("Mul", [level, g.const("fg_minus_bg", fg - bg)], "tint")
    g.op("Add", [g.const("background", bg), mixed], "image")
    inputs = [helper.make_tensor_value_info("latent", TensorProto.FLOAT, [1, 1, h, w])]
    outputs = [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, h * scale, w * scale, 3])]
    return g.model("decoder", inputs, outputs, f"{cfg.name} decoder: bilinear x{scale}, two colours",
                   {"model": cfg.name, "branch": "decoder"})


# ---------------------------------------------------------------- whole partition

def subgraph_file(block: int, branch: str) -> str:
    return f"{subgraph_index(block, branch):02d}_block{block:02d}_{branch}.onnx"


def _specs(model: onnx.ModelProto, which) -> list[TensorSpec]:
    out = []
    for vi in which(model.graph):
        t = vi.type.tensor_type
        out.append(TensorSpec(vi.name, tuple(d.dim_value for d in t.shape.dim),
                              helper.tensor_dtype_to_np_dtype(t.elem_type).name))
    return out


def _write(model: onnx.ModelProto, out_dir: Path, file: str, index: int, block, branch) -> SubgraphEntry:
    data = model.SerializeToString()
    onnx.checker.check_model(data)     # the bytes we write, serialised once
    atomic_write_bytes(out_dir / file, data)
    return SubgraphEntry(index=index, block=block, branch=branch, file=file,
                         sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                         inputs=_specs(model, lambda g: g.input), outputs=_specs(model, lambda g: g.output))


def _select_blocks(cfg: ModelConfig, blocks) -> list[int]:
    if blocks is None:
        return list(range(cfg.blocks))
    chosen = sorted({_check_block(cfg, b) for b in blocks})
    if not chosen:
        raise ConfigError("no blocks selected for export")
    return chosen


def _has_decoder(cfg: ModelConfig) -> bool:
    return _decoder_source(cfg) is not None or (cfg.latent_channels == 1 and bool(cfg.decoder))


def planned_files(cfg: ModelConfig, blocks=None) -> int:
    """How many ONNX files an export of `blocks` writes (for a caller's progress display)."""
    return len(_select_blocks(cfg, blocks)) * len(BRANCHES) + int(_has_decoder(cfg))


def export_partition(weights, cfg: ModelConfig, out_dir, dtype: str = "float32", streams: int = 2,
                     opset: int = DEFAULT_OPSET, blocks=None, on_file: Callable[[], None] | None = None,
                     weights_source: str | None = None, fake_quant: str | None = None) -> Manifest:
    """Write one ONNX file per subgraph (+ decoder.onnx when the model has one) and manifest.json.

    `weights` is a Checkpoint (or its path) or a dict of tensors. Tensors are read one block at a time
    and dropped when the block's three subgraphs are written, so peak memory is one block's tensors
    and one subgraph's graph, not the model. The weights digest is hashed tensor by tensor on the way
    (the blocks not exported are read for it too, one tensor at a time).
    fake_quant="ffn-w8a8" simulates INT8 FFN linears (weights and activations) in the graph dtype.
    on_file() is called after each file is written (the CLI draws its progress bar with it; the
    exporter itself prints nothing).
    """
    _check_dtype(dtype)
    _check_fake_quant(fake_quant)
    _check_streams(streams)
    check_opset(opset)
    chosen = _select_blocks(cfg, blocks)
    source = as_source(weights, cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # An interrupted export must not leave an old manifest vouching for half-replaced files.
    manifest_path(out_dir).unlink(missing_ok=True)
    decoder_file = _decoder_source(cfg)
    advance = on_file or (lambda: None)
    entries, islands, hashes = [], {}, {}
    known = source.known_digest()       # e.g. computed for the default directory name
    for block in chosen:
        w = source.block_tensors(block)
        if known is None:
            hashes.update((k, tensor_digest(k, v)) for k, v in w.items())
        for branch in BRANCHES:
            model, wrapped = _build(w, cfg, block, branch, dtype, streams, opset, fake_quant)
            islands[branch] = wrapped
            entries.append(_write(model, out_dir, subgraph_file(block, branch),
                                  subgraph_index(block, branch), block, branch))
            del model
            advance()
        del w
    decoder = None
    if _has_decoder(cfg):
        model = onnx.load(decoder_file) if decoder_file else build_decoder(cfg, opset)
        decoder = _write(model, out_dir, DECODER_FILE, cfg.subgraphs, None, "decoder")
        advance()
    for key in source.keys() if known is None else ():   # the rest: host tensors, blocks not exported
        if key not in hashes:
            hashes[key] = tensor_digest(key, source.read([key])[key])
    export = {"dtype": dtype, "streams": streams, "opset": opset, "latent_size": list(cfg.latent_size),
              "tokens": cfg.tokens, "context_tokens": cfg.context_tokens, "blocks": chosen,
              "fp32_islands": {b: islands[b] for b in BRANCHES if islands.get(b)}}
    if fake_quant:
        export["fake_quant"] = fake_quant
    if decoder_file:
        export["decoder_source"] = str(decoder_file)
    manifest = Manifest(directory=out_dir, format=FORMAT,
                        model={"name": cfg.name, "network": network_settings(cfg)},
                        weights_sha256=known or combine_digests(hashes),
                        weights_source=weights_source or getattr(source, "source", None),
                        export=export, subgraphs=entries, decoder=decoder)
    manifest.save()
    return manifest


def _decoder_source(cfg: ModelConfig) -> Path | None:
    """The user's decoder ONNX named in model.toml ([decoder] onnx), checked to exist and load."""
    name = cfg.decoder.get("onnx")
    if not name:
        return None
    path = Path(cfg.source).parent / name
    if not path.is_file():
        raise ConfigError(f"{cfg.source}: [decoder] onnx = '{name}' but {path} does not exist")
    return path
