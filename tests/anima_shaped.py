"""The Anima-shaped CI model's folders, and a stand-in decoder ONNX for its tests.

The decoder stands in for a user's VAE-decoder export: latent [1, C, H, W] -> per-pixel linear map
to RGB, tanh -> image [1, 3, H, W] in [-1, 1] (model.toml: [decoder] onnx, output_range = [-1, 1]).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.model.config import REPO_ROOT, ModelConfig

MODEL_DIR = REPO_ROOT / "models" / "anima-shaped"
GOLDEN_DIR = REPO_ROOT / "golden" / "anima-shaped"


def write_decoder_onnx(cfg: ModelConfig, path: str | Path, seed: int = 0) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    h, w = cfg.latent_size
    c = cfg.latent_channels
    rng = np.random.default_rng(seed)
    mix = (rng.standard_normal((3, c)) / np.sqrt(c)).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["latent", "flat_shape"], ["flat"]),            # [C, H*W]
        helper.make_node("MatMul", ["mix", "flat"], ["rgb_flat"]),                 # [3, H*W]
        helper.make_node("Tanh", ["rgb_flat"], ["rgb_tanh"]),
        helper.make_node("Reshape", ["rgb_tanh", "image_shape"], ["image"]),
    ]
    inits = [numpy_helper.from_array(np.array([c, h * w], np.int64), "flat_shape"),
             numpy_helper.from_array(mix, "mix"),
             numpy_helper.from_array(np.array([1, 3, h, w], np.int64), "image_shape")]
    graph = helper.make_graph(nodes, "decoder",
                              [helper.make_tensor_value_info("latent", TensorProto.FLOAT, [1, c, h, w])],
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, h, w])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)
