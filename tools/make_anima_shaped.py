"""Write the Anima-shaped CI model's files: its random BF16 checkpoint (with a `net.` prefix and an
`llm_adapter.*` group), the golden cases' text embeddings, and optionally a decoder ONNX.

    .venv/bin/python tools/make_anima_shaped.py                       # models/anima-shaped + golden text embeddings
    .venv/bin/python tools/make_anima_shaped.py --decoder OUT.onnx    # a stand-in decoder for tests

The decoder stands in for a user's VAE-decoder export: latent [1, C, H, W] -> per-pixel linear map
to RGB, tanh -> image [1, 3, H, W] in [-1, 1] (model.toml: [decoder] onnx, output_range = [-1, 1]).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.model.config import ModelConfig, load_model_dir  # noqa: E402
from tools.make_checkpoint import write_random_checkpoint  # noqa: E402

__all__ = ["write_decoder_onnx", "write_text_embs", "MODEL_DIR", "GOLDEN_DIR", "TEXT_EMBS"]

MODEL_DIR = ROOT / "models" / "anima-shaped"
GOLDEN_DIR = ROOT / "golden" / "anima-shaped"
TEXT_EMBS = ("cond_a.npy", "cond_b.npy", "uncond.npy")


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


def write_text_embs(cfg: ModelConfig, directory: Path, seed: int = 0) -> list[Path]:
    """Random text embeddings [text_emb_tokens, text_emb_dim] ~ N(0, 1) for the golden cases."""
    rng = np.random.default_rng(seed)
    paths = []
    for name in TEXT_EMBS:
        path = directory / name
        np.save(path, rng.standard_normal((cfg.text_emb_tokens, cfg.text_emb_dim)).astype(np.float32))
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--golden-dir", type=Path, default=GOLDEN_DIR)
    parser.add_argument("--decoder", type=Path, help="only write a stand-in decoder ONNX here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cfg = load_model_dir(args.model_dir)
    if args.decoder:
        print(write_decoder_onnx(cfg, args.decoder, args.seed))
        return 0
    write_random_checkpoint(cfg, args.model_dir / cfg.files["weights"], "bfloat16", "net.", True, args.seed)
    args.golden_dir.mkdir(parents=True, exist_ok=True)
    for path in write_text_embs(cfg, args.golden_dir, args.seed):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
