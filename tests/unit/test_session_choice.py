"""onnxruntime session options chosen by what a subgraph costs: a small one (session creation
dominates) keeps one thread, a full-width one (its GEMMs dominate) gets every usable core; the
`threads` option still decides when given, and the outputs do not depend on the choice."""
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.backends.base import BackendOptions
from harness.backends.onnxruntime import RUN_DOMINATED_BYTES, OnnxRuntimeContext

LABEL = "subgraph 1 (block 0 ffn)"


def _matmul_file(tmp_path, n: int):
    weight = np.random.default_rng(n).standard_normal((n, n), dtype=np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, n])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / f"m{n}.onnx"
    path.write_bytes(model.SerializeToString())
    return path, weight


def _run(ctx, path, x):
    ctx.load(path)
    ctx.init()
    try:
        return ctx.session_threads, ctx.run([x])[0]
    finally:
        ctx.release()


@pytest.mark.parametrize("n, many", [(64, False), (1024, True)])
def test_threads_follow_the_subgraph_size(tmp_path, n, many):
    path, weight = _matmul_file(tmp_path, n)
    assert (path.stat().st_size >= RUN_DOMINATED_BYTES) == many
    x = np.random.default_rng(0).standard_normal((4, n), dtype=np.float32)
    threads, y = _run(OnnxRuntimeContext(LABEL), path, x)
    assert threads == (len(os.sched_getaffinity(0)) if many else 1)
    np.testing.assert_allclose(y, x @ weight, rtol=1e-4, atol=1e-4)


def test_threads_option_overrides_the_choice(tmp_path):
    path, weight = _matmul_file(tmp_path, 1024)
    x = np.random.default_rng(1).standard_normal((4, 1024), dtype=np.float32)
    threads, one = _run(OnnxRuntimeContext(LABEL, BackendOptions("onnxruntime", {"threads": 1})), path, x)
    assert threads == 1
    _, auto = _run(OnnxRuntimeContext(LABEL), path, x)
    np.testing.assert_array_equal(one, auto)


def _wide_intermediate_file(tmp_path, n: int = 1024):
    """x [4096, n] @ w [n, n] -> a 16 MiB intermediate, reduced to a small output: what a call
    faults in is then the intermediate, not the output the backend copies."""
    weight = np.random.default_rng(n).standard_normal((n, n), dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("ReduceSum", ["h", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
                              [numpy_helper.from_array(weight, "w"),
                               numpy_helper.from_array(np.array([0], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "wide.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_run_dominated_sessions_share_one_arena(tmp_path):
    """A fresh session per invocation must not fault its intermediates in afresh every time (the
    16 MiB intermediate is 4,096 pages): the second and later sessions reuse the shared arena's."""
    import resource
    path = _wide_intermediate_file(tmp_path)
    assert path.stat().st_size >= RUN_DOMINATED_BYTES
    x = np.random.default_rng(4).standard_normal((4096, 1024), dtype=np.float32)
    faults, outputs = [], []
    for _ in range(3):
        ctx = OnnxRuntimeContext(LABEL, BackendOptions("onnxruntime", {"threads": 1}))
        ctx.load(path)
        ctx.init()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        outputs.append(ctx.run([x])[0])
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        ctx.release()
    assert max(faults[1:]) < 1024, faults
    for y in outputs[1:]:
        np.testing.assert_array_equal(y, outputs[0])


def test_a_run_dominated_model_is_read_once(tmp_path):
    """load + init of a 64 MiB model must not fault in a copy of the file more than the session's
    own parse and weights need: the bytes read at load were one more (16,384 pages here; above
    glibc's largest mmap threshold, 32 MiB, every copy is mapped and faulted in afresh)."""
    import resource
    path, weight = _matmul_file(tmp_path, 4096)
    pages = path.stat().st_size // 4096
    x = np.random.default_rng(5).standard_normal((4, 4096), dtype=np.float32)
    faults = []
    for _ in range(3):
        ctx = OnnxRuntimeContext(LABEL, BackendOptions("onnxruntime", {"threads": 1}))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        ctx.load(path)
        ctx.init()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        y = ctx.run([x])[0]
        ctx.release()
    # onnxruntime 1.32 faults in 3.7 copies of the file building the session from its path, 5.0
    # when handed the bytes read at load.
    assert min(faults) < 4.5 * pages, (faults, pages)
    np.testing.assert_allclose(y, x @ weight, rtol=1e-4, atol=1e-3)
