"""The ONNX graph builder of one subgraph: opsets, nodes, initializers and the float16 islands (explicit
casts around the ops onnxruntime's CPU provider has no float16 kernel for), probed once per op type."""
from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..core.errors import ConfigError, WeightsError

__all__ = ["DTYPES", "DEFAULT_OPSET", "MAX_OPSET", "check_opset", "float16_missing_kernels"]


DTYPES = {"float32": (np.float32, TensorProto.FLOAT), "float16": (np.float16, TensorProto.FLOAT16)}
DEFAULT_OPSET = 17
MAX_OPSET = 19      # rknn-toolkit2 refuses newer opsets
MIN_OPSET = 13      # Softmax over one axis (not flattened) needs 13+
# Op types used for arithmetic; everything else in these graphs only moves data.
COMPUTE_OPS = ("MatMul", "Add", "Sub", "Mul", "Div", "Sqrt", "Erf", "Softmax", "ReduceMean",
                "Abs", "ReduceMax", "Round")


def check_opset(opset: int) -> int:
    if not isinstance(opset, int) or isinstance(opset, bool):
        raise ConfigError(f"opset must be a whole number, got {opset!r}")
    if opset > MAX_OPSET:
        raise ConfigError(f"opset {opset} is too new: the RKNN converter accepts opset <= {MAX_OPSET}")
    if opset < MIN_OPSET:
        raise ConfigError(f"opset {opset} is too old: the exported graphs need opset >= {MIN_OPSET}")
    return opset


def _probe_model(op_type: str, opset: int) -> onnx.ModelProto:
    f16 = TensorProto.FLOAT16
    shapes = {"MatMul": ([2, 4, 8], [8, 8])}.get(op_type, ([2, 4, 8], [2, 4, 8])
                                                   if op_type in ("Add", "Sub", "Mul", "Div") else ([2, 4, 8],))
    inputs = [helper.make_tensor_value_info(f"in{k}", f16, s) for k, s in enumerate(shapes)]
    names, inits = [i.name for i in inputs], []
    attrs: dict[str, Any] = {}
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


@functools.cache
def lacks_float16_kernel(op_type: str, opset: int) -> bool:
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


def float16_missing_kernels(opset: int = DEFAULT_OPSET) -> frozenset[str]:
    """Op types used by the export that onnxruntime's CPU provider cannot run in float16 here."""
    check_opset(opset)
    return frozenset(op for op in COMPUTE_OPS if lacks_float16_kernel(op, opset))


def _finish_model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="harness.partition")
    # The oldest IR that carries this opset, so older converters (onnx <= 1.18) can read the file.
    model.ir_version = helper.find_min_ir_version_for(opsets)
    return model


class Graph:
    """Nodes and initializers of one subgraph; float16 islands are wrapped here, in one place."""

    def __init__(self, dtype: str, opset: int):
        self.np_dtype, self.elem = DTYPES[dtype]
        self.opset = opset
        self.float16 = dtype == "float16"
        self.missing = float16_missing_kernels(opset) if self.float16 else frozenset()
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.int_names: set[str] = set()
        self.islands: list[str] = []
        self.fp32_of: dict[str, str] = {}
        # A fused subgraph holds several bodies: each names its tensors under its own prefix, and the
        # name a body reads as its input ("x") is an alias of the modulated stream it is given.
        self.prefix = ""
        self.alias: dict[str, str] = {}

    def const(self, name: str, value, source: str | None = None) -> str:
        """A float constant in the graph dtype; float16 overflow is a weights error naming `source`."""
        name = self.prefix + name
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
        name = self.prefix + name
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        self.int_names.add(name)
        return name

    def weight_t(self, name: str, w: dict, key: str) -> str:
        """Weights are stored [out, in]; MatMul wants [in, out]."""
        if key not in w:
            raise WeightsError(f"weights have no '{key}' (needed by the '{name}' subgraph node)")
        return self.const(name, np.ascontiguousarray(np.asarray(w[key], dtype=np.float32).T), source=key)

    def op(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        name = self.prefix + name
        inputs = [self.alias.get(src, src) for src in inputs]
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
        self.nodes.append(helper.make_node("Cast", [f"{name}/island"], [name], name=f"{name}/float16",
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


def add_linear(g: Graph, x: str, w: dict, key: str, name: str) -> str:
    return g.op("MatMul", [x, g.weight_t(f"{name}.weight_t", w, key)], name)


def add_rms_norm(g: Graph, x: str, w: dict, key: str, eps: float, name: str) -> str:
    # ops.rms_norm: (x / sqrt(mean(x^2) + eps)) * weight
    sq = g.op("Mul", [x, x], f"{name}/square")
    ms = g.reduce_mean_last(sq, f"{name}/mean")
    rms = g.op("Sqrt", [g.op("Add", [ms, g.const(f"{name}/eps", eps)], f"{name}/add_eps")], f"{name}/sqrt")
    normed = g.op("Div", [x, rms], f"{name}/div")
    if key not in w:
        raise WeightsError(f"weights have no '{key}' (needed by the '{name}' subgraph node)")
    return g.op("Mul", [normed, g.const(f"{name}.weight", w[key], source=key)], name)


def add_heads(g: Graph, x: str, shape: list[int], name: str) -> str:
    """[S, N, H*d] -> head-major [S*H, N, d] (shape is [S, N, H, d]).

    Head-major before the norm and RoPE, not after: rknn-toolkit2 lays a rank-3 [S*H, N, d] out as the
    [S*H, d, 1, N] its fused attention reads, so no Transpose is left after RoPE. A [S, N, H, d]
    tensor is laid out [S, d, H, N], and its Transpose to [S, H, d, N] (a d*N plane: 131,072 elements
    at N = 1024, d = 128) overflows the NPU's 65,536-element surface and falls back to the CPU. The
    norm and RoPE act on each row of d alone, so the values are unchanged.
    """
    s, n, h, d = shape
    split = g.op("Reshape", [x, g.ints(f"{name}/shape", shape)], f"{name}/split")
    major = g.op("Transpose", [split], f"{name}/t", perm=[0, 2, 1, 3])
    return g.op("Reshape", [major, g.ints(f"{name}/major_shape", [s * h, n, d])], name)


def add_rope(g: Graph, x: str, cos: str, sin: str, half: int, name: str) -> str:
    # ops.apply_rope: split-half pairs (k, k + half); cos/sin [N, half] broadcast over the S*H head-major batch.
    axis = g.ints(f"{name}/axis", [-1])
    x1 = g.op("Slice", [x, g.ints(f"{name}/s0", [0]), g.ints(f"{name}/e0", [half]), axis], f"{name}/x1")
    x2 = g.op("Slice", [x, g.ints(f"{name}/s1", [half]), g.ints(f"{name}/e1", [2 * half]), axis], f"{name}/x2")
    lo = g.op("Sub", [g.op("Mul", [x1, cos], f"{name}/x1cos"), g.op("Mul", [x2, sin], f"{name}/x2sin")],
              f"{name}/lo")
    hi = g.op("Add", [g.op("Mul", [x1, sin], f"{name}/x1sin"), g.op("Mul", [x2, cos], f"{name}/x2cos")],
              f"{name}/hi")
    return g.op("Concat", [lo, hi], name, axis=-1)


def add_attention(g: Graph, q: str, k: str, v: str, head_dim: int, out_shape: list[int]) -> str:
    # ops.attention: softmax((q k^T) * 1/sqrt(d)) v over head-major [S*H, N, d] (see add_heads)
    s, n, width = out_shape
    kt = g.op("Transpose", [k], "attn/k_t", perm=[0, 2, 1])
    scores = g.op("Mul", [g.op("MatMul", [q, kt], "attn/qk"),
                          g.const("attn/scale", 1.0 / math.sqrt(head_dim))], "attn/scores")
    probs = g.op("Softmax", [scores], "attn/softmax", axis=-1)
    pv = g.op("MatMul", [probs, v], "attn/pv")
    heads = g.op("Reshape", [pv, g.ints("attn/heads_shape", [s, width // head_dim, n, head_dim])], "attn/heads")
    o = g.op("Transpose", [heads], "attn/o", perm=[0, 2, 1, 3])
    return g.op("Reshape", [o, g.ints("attn/merge_shape", out_shape)], "attn/merge")
