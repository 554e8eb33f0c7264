"""The host's FP32 <-> FP16 casts around every subgraph call, done by onnxruntime's Cast kernel.

numpy converts float16 one element at a time: at full width (x of [2, 1024, 2048]) a cast took
16-22 ms each way, 84 x 2 of them a step, where onnxruntime's vectorised Cast takes 0.5-1 ms
(docs/full-size.md). Both round to nearest even, so the bits are the same (tests/unit/test_casts.py
checks every class of value: normals, subnormals, overflow to infinity, signed zeros); small arrays
stay with numpy, whose call costs less than a session run.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

__all__ = ["cast", "ORT_CAST_ELEMENTS"]

# From about here a session run (tens of microseconds) costs less than numpy's element loop.
ORT_CAST_ELEMENTS = 1 << 16
_PAIRS = {(np.dtype(np.float32), np.dtype(np.float16)), (np.dtype(np.float16), np.dtype(np.float32))}
_lock = threading.Lock()


@functools.cache
def _session(src: str, dst: str):
    import onnxruntime as ort
    from onnx import helper

    elem = {"float32": 1, "float16": 10}            # onnx TensorProto.FLOAT, FLOAT16
    graph = helper.make_graph([helper.make_node("Cast", ["a"], ["y"], to=elem[dst])], "cast",
                              [helper.make_tensor_value_info("a", elem[src], None)],
                              [helper.make_tensor_value_info("y", elem[dst], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    # One thread, as the host's other math: the cast is memory-bound and the subgraphs own the cores.
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def cast(array: np.ndarray, dtype) -> np.ndarray:
    """`array` as `dtype` (a new array unless it already is one), bitwise what numpy's astype gives."""
    array = np.asarray(array)
    dtype = np.dtype(dtype)
    if array.dtype == dtype:
        return array
    if (array.dtype, dtype) not in _PAIRS or array.size < ORT_CAST_ELEMENTS:
        return array.astype(dtype)
    with _lock:                 # sessions are built once per process, from any thread
        session = _session(array.dtype.name, dtype.name)
    return session.run(None, {"a": np.ascontiguousarray(array)})[0]
