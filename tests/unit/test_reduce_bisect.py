"""`harness reduce`'s bisection (harness/gates/bisect.py, harness/toolkit/cut.py) against onnxruntime
alone: onnxruntime in FP16 stands for the backend under test, so a weight scaled past the float16
range makes a real divergence from the FP32 reference, and the search must name the op that makes it."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.gates.bisect import reduce_graph
from harness.toolkit.cut import Graph, reference_values


def _model(scale: float) -> onnx.ModelProto:
    """x -> Mul(2) -> MatMul(w1 * scale) `wide` -> Relu -> MatMul(w2 / scale) -> Add(bias) -> Mul -> y:
    the hidden layer grows by `scale`, the output does not (the scaled FFN of the headroom tests)."""
    rng = np.random.default_rng(0)
    weights = {"gain": np.array(2.0, np.float32), "w1": rng.standard_normal((32, 64)).astype(np.float32) * scale,
               "w2": rng.standard_normal((64, 32)).astype(np.float32) / scale,
               "bias": rng.standard_normal(32).astype(np.float32), "two": np.array(2.0, np.float32)}
    nodes = [helper.make_node("Mul", ["x", "gain"], ["xh"], name="pre"),
             helper.make_node("MatMul", ["xh", "w1"], ["wide"], name="layer1"),
             helper.make_node("Relu", ["wide"], ["act"], name="relu"),
             helper.make_node("MatMul", ["act", "w2"], ["narrow"], name="layer2"),
             helper.make_node("Add", ["narrow", "bias"], ["biased"], name="bias_add"),
             helper.make_node("Mul", ["biased", "two"], ["y"], name="post")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 32])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_fp16(segment, input_sets):
    """The backend under test: onnxruntime one node at a time, every tensor stored in float16 between
    nodes, as a float16 NPU stores them (one whole-graph session would keep a chain of ops without a
    float16 kernel, MatMul here, in float32 between its casts)."""
    model = segment.model
    stored16 = {t.name: numpy_helper.to_array(t).astype(np.float16) for t in model.graph.initializer}
    results = []
    for inputs in input_sets:
        tensors = {**stored16, **{name: a.astype(np.float16) for name, a in zip(segment.inputs, inputs)}}
        for node in model.graph.node:
            feeds = {name: tensors[name].astype(np.float32) for name in node.input}
            graph = helper.make_graph([node], "one", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                      for n in feeds],
                                      [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output])
            one = helper.make_model(graph, opset_imports=list(model.opset_import))
            session = ort.InferenceSession(one.SerializeToString(), providers=["CPUExecutionProvider"])
            with np.errstate(over="ignore"):
                tensors.update(zip(node.output, (o.astype(np.float16) for o in session.run(None, feeds))))
        results.append([tensors[name].astype(np.float32) for name in segment.outputs])
    return results


def _values(model):
    x = np.random.default_rng(1).standard_normal((2, 8, 32)).astype(np.float32)
    return [reference_values(model, [x])]


def test_bisection_names_the_op_that_overflows_float16():
    model = _model(8192.0)          # weights within float16, the hidden layer near 3e5: past 65504
    lines = []
    found = reduce_graph(Graph(model), _values(model), _run_fp16, 0.9999, say=lines.append)
    assert found is not None
    assert [op["name"] for op in found.ops] == ["layer1"], lines
    assert found.ops[0]["outputs"] == ["wide"] and not np.isfinite(found.cosine)
    # every try said on one line: nodes, check, verdict; the first is the whole graph, and bad
    assert len(lines) == len(found.tries) and lines[0].startswith("try  1  nodes 0-5 ") and "BAD" in lines[0]
    assert all(("good" in line) != ("BAD" in line) for line in lines)


def test_a_graph_that_passes_has_nothing_to_reduce():
    model = _model(1.0)
    lines = []
    assert reduce_graph(Graph(model), _values(model), _run_fp16, 0.999, say=lines.append) is None
    assert len(lines) == 1 and "good" in lines[0]


def test_a_range_is_fed_the_fp32_values_and_keeps_constants():
    model = _model(1.0)
    graph = Graph(model)
    values = _values(model)[0]
    segment = graph.segment(2, 4, values)        # Relu, MatMul layer2
    assert segment.inputs == ["wide"] and segment.outputs == ["narrow"]
    session = ort.InferenceSession(segment.model.SerializeToString(), providers=["CPUExecutionProvider"])
    out = session.run(None, {"wide": values["wide"]})[0]
    np.testing.assert_allclose(out, values["narrow"], rtol=1e-5, atol=1e-5)
    assert graph.describe(2, 4) == "Relu relu .. MatMul layer2 (2 nodes)"


@pytest.mark.parametrize("start, end", [(0, 1), (5, 6), (0, 6)])
def test_every_range_runs_alone(start, end):
    model = _model(1.0)
    values = _values(model)[0]
    segment = Graph(model).segment(start, end, values)
    onnx.checker.check_model(segment.model)
    session = ort.InferenceSession(segment.model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = session.run(None, dict(zip(segment.inputs, segment.feeds(values))))
    for name, out in zip(segment.outputs, outs):
        np.testing.assert_allclose(out, values[name], rtol=1e-5, atol=1e-5)


def _cell(cosine: float, passes: bool) -> dict:
    return {"cosine": cosine, "max_abs": 0.0, "shapes_match": True, "cpu_ops": [], "bytes": 1024,
            "build_seconds": 0.1, "passes": passes}


def test_compare_toolkits_prints_a_reduce_command_for_each_failing_subgraph(tmp_path):
    from harness.cli.main import build_parser
    from harness.gates.compare_toolkits import Comparison, reduce_commands
    from harness.report.toolkit import comparison_markdown
    table = [{"subgraph": "subgraph 2 (block 0 ffn)", "file": "02_block00_ffn.rknn",
              "versions": {"2.3.2": _cell(1.0, True), "2.5.0": _cell(float("nan"), False)}},
             {"subgraph": "subgraph 3 (block 1 self_attn)", "file": "03_block01_self_attn.rknn",
              "versions": {"2.3.2": _cell(1.0, True), "2.5.0": _cell(0.99999, True)}}]
    rows = reduce_commands(table, "2.5.0", tmp_path / "fp32", tmp_path / "cmp", tmp_path / "model", 0.9999)
    assert [r["subgraph"] for r in rows] == ["subgraph 2 (block 0 ffn)"]
    argv = rows[0]["command"].split()
    assert argv[:2] == ["bin/harness", "reduce"]
    args = build_parser(["reduce"]).parse_args(argv[1:])
    assert (args.subgraph, args.toolkit, args.inputs) == ("02_block00_ffn", "2.5.0", "random")
    assert args.partition == tmp_path / "fp32" and args.out == tmp_path / "cmp" / "reduce" / "02_block00_ffn"
    header = {"target": "rk3588", "precision": "float16", "partition": "p", "model": "m", "golden_dir": "g",
              "sim_samples": 1, "cosine_min": 0.9999, "conversion_seconds": {}, "reduce": rows}
    report = Comparison("2.3.2", "2.5.0", header, subgraphs=table, failures=["1 subgraph(s) under cosine"]).to_json()
    text = comparison_markdown(report)
    assert f"`{rows[0]['command']}`" in text and rows[0]["repro"] in text


def test_a_subgraph_whose_output_is_not_finite_fails_compare_toolkits():
    # NaN < cosine_min is False: compare-toolkits once let a NaN cosine through its subgraph check
    from harness.gates.compare_toolkits import subgraph_failures
    table = [{"subgraph": "subgraph 2 (block 0 ffn)", "file": "02_block00_ffn.rknn",
              "versions": {"2.5.0": _cell(float("nan"), False)}},
             {"subgraph": "subgraph 3 (block 1 self_attn)", "file": "03_block01_self_attn.rknn",
              "versions": {"2.5.0": _cell(0.99985, False)}}]
    [failure] = subgraph_failures(table, "2.5.0", 0.9999)
    assert failure.startswith("2 subgraph(s) under cosine 0.9999, worst subgraph 2 (block 0 ffn): cosine nan")
