"""Node ranges of one subgraph's ONNX graph as models of their own (what `harness reduce` bisects).

A range [start, end) of the graph's nodes (ONNX keeps them in topological order) becomes a model whose
inputs are the tensors its nodes read and no node of the range writes, and whose outputs are the
tensors it writes that a later node or the graph's output reads. A range input computed from
constants alone (a shape, a scale) goes in as an initializer, so the toolkit sees a constant where
the whole graph had one; every other input is fed the value onnxruntime FP32 computed for it from the
subgraph's own inputs (`reference_values`), so each range is judged on the activations it would get.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["Graph", "Segment", "reference_values"]


@dataclass(frozen=True)
class Segment:
    """One range as a model: its bytes, its inputs (fed, in order) and its outputs (checked)."""
    start: int
    end: int
    model: onnx.ModelProto
    inputs: list[str]
    outputs: list[str]

    def feeds(self, values: dict) -> list[np.ndarray]:
        return [values[name] for name in self.inputs]


class Graph:
    """A subgraph's ONNX model, cut into node ranges."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.nodes = list(model.graph.node)
        self.initializers = {t.name: t for t in model.graph.initializer}
        self.outputs = [o.name for o in model.graph.output]
        self.static = self._static()

    def _static(self) -> set[str]:
        """Tensors computed from constants alone: initializers and what only they feed."""
        static = set(self.initializers)
        for node in self.nodes:
            if all(not name or name in static for name in node.input):
                static.update(node.output)
        return static

    def describe(self, start: int, end: int) -> str:
        """'MatMul layer1' or 'MatMul layer1 .. Mul gelu (6 nodes)'."""
        first, last = self.nodes[start], self.nodes[end - 1]
        one = f"{first.op_type} {first.name or first.output[0]}"
        if end - start == 1:
            return one
        return f"{one} .. {last.op_type} {last.name or last.output[0]} ({end - start} nodes)"

    def segment(self, start: int, end: int, values: dict) -> Segment:
        """Nodes [start, end) as a model; `values` holds every tensor's FP32 value (reference_values)."""
        nodes = self.nodes[start:end]
        written = [name for node in nodes for name in node.output if name]
        later = {name for node in self.nodes[end:] for name in node.input} | set(self.outputs)
        outputs = [name for name in written if name in later and name not in self.static] or \
            [nodes[-1].output[0]]
        read = []
        for node in nodes:
            read += [name for name in node.input if name and name not in written and name not in read]
        constants = [name for name in read if name in self.static]
        inputs = [name for name in read if name not in self.static]
        graph = helper.make_graph(
            nodes, f"nodes_{start}_{end}",
            [_info(name, values[name]) for name in inputs],
            [_info(name, values[name]) for name in outputs],
            [self.initializers[name] if name in self.initializers
             else numpy_helper.from_array(np.asarray(values[name]), name) for name in constants])
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        model.ir_version = self.model.ir_version
        return Segment(start, end, model, inputs, outputs)


def _info(name: str, value) -> onnx.ValueInfoProto:
    array = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))


def reference_values(model: onnx.ModelProto, feeds: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor of the graph as onnxruntime FP32 computes it from `feeds` (in input order)."""
    import onnxruntime as ort
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(probe)
    known = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    present = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in present:
                probe.graph.output.append(known.get(name) or helper.make_empty_tensor_value_info(name))
                present.add(name)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    values = dict(zip(names, feeds))
    outputs = [o.name for o in session.get_outputs()]
    values.update(zip(outputs, session.run(None, dict(zip(names, feeds)))))
    return values
