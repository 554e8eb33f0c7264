"""The FLOP count a bound divides is the exported graphs' own: every MatMul's multiply-accumulates,
read from the ONNX subgraphs with their inferred shapes, add up to harness.model.flops per branch."""
import numpy as np
import onnx
import pytest

from harness.model.config import BRANCHES, EMBEDDED_DIR, load_model_dir, load_profile
from harness.model.flops import branch_flops, branch_macs, step_flops
from harness.model.weights import random_weights
from harness.partition.onnx_export import build_subgraph


def _matmul_macs(model: onnx.ModelProto) -> int:
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    shapes.update({t.name: list(t.dims) for t in inferred.graph.initializer})
    total = 0
    for node in inferred.graph.node:
        if node.op_type == "MatMul":
            k = shapes[node.input[0]][-1]
            total += int(np.prod(shapes[node.output[0]])) * k
    return total


@pytest.mark.parametrize("load", [lambda: load_profile("cosmos-tiny"), lambda: load_model_dir(EMBEDDED_DIR)],
                         ids=["cosmos-tiny", "embedded"])
def test_flops_match_the_exported_matmuls(load):
    cfg = load()
    weights = random_weights(cfg, blocks=range(1))
    for branch in BRANCHES:
        model = build_subgraph(weights, cfg, 0, branch, streams=2)
        assert _matmul_macs(model) == 2 * branch_macs(cfg, branch), branch
        assert branch_flops(cfg, branch, streams=2) == 4 * branch_macs(cfg, branch)
    assert step_flops(cfg, 2) == cfg.blocks * sum(branch_flops(cfg, b, 2) for b in BRANCHES)
