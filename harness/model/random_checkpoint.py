"""A random-weight DiT checkpoint in the public Cosmos-Predict2 key layout, streamed to disk.

For proving the full-size path without the real Anima weights (the anima-2b profile gives a ~4 GB BF16
file of the real shapes, docs/architecture.md section 1), and for the Anima-shaped CI model. Keys may
sit under a prefix (`net.`) beside an `llm_adapter.*` group as the released Anima files have; the
adapter's shapes are made up (the harness ignores the group; only its presence matters). One tensor
is in memory at a time. Each tensor's values depend only on the seed and its key, so a file written
with another prefix, precision or adapter holds the same DiT (as far as the precision keeps it).
"""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from .config import ModelConfig
from .safetensors_io import f32_to_bf16_bits, write_streamed
from .weights import expected_shapes

DTYPE_TAGS = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def random_tensor(key: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """float32: norms ~ 1 + 0.1 N(0, 1), linear weights ~ N(0, 1/fan_in) (stored [out, in])."""
    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    values = rng.standard_normal(shape, dtype=np.float32)
    if len(shape) == 1:
        return values * np.float32(0.1) + np.float32(1.0)
    return values * np.float32(1.0 / np.sqrt(shape[1]))


def adapter_shapes(cfg: ModelConfig, layers: int = 1) -> dict[str, tuple[int, ...]]:
    """A stand-in `llm_adapter.*` group at the text side's width (made-up shapes)."""
    c = cfg.text_emb_dim
    shapes: dict[str, tuple[int, ...]] = {"llm_adapter.embed.weight": (c, c)}
    for i in range(layers):
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shapes[f"llm_adapter.layers.{i}.attn.{name}.weight"] = (c, c)
        shapes[f"llm_adapter.layers.{i}.mlp.fc1.weight"] = (4 * c, c)
        shapes[f"llm_adapter.layers.{i}.mlp.fc2.weight"] = (c, 4 * c)
        shapes[f"llm_adapter.layers.{i}.norm.weight"] = (c,)
    return shapes


def _stored(values: np.ndarray, tag: str) -> np.ndarray:
    if tag == "BF16":
        return f32_to_bf16_bits(values)
    return values.astype("<f2" if tag == "F16" else "<f4")


def write_random_checkpoint(cfg: ModelConfig, path: str | Path, precision: str = "bfloat16", prefix: str = "",
                            llm_adapter: bool = False, seed: int = 0, adapter_layers: int = 1) -> int:
    """Write the checkpoint; returns its size in bytes."""
    tag = DTYPE_TAGS[precision]
    shapes = {prefix + k: v for k, v in expected_shapes(cfg).items()}
    if llm_adapter:
        shapes.update(adapter_shapes(cfg, adapter_layers))
    inner = {prefix + k: k for k in expected_shapes(cfg)}
    specs = [(key, tag, shape) for key, shape in shapes.items()]
    return write_streamed(path, specs, lambda key: _stored(random_tensor(inner.get(key, key), shapes[key], seed), tag),
                          metadata={"format": "pt", "producer": "harness/model/random_checkpoint.py",
                                    "profile": cfg.name, "seed": seed})
