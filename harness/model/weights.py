"""Weights in the public Cosmos-Predict2 key layout (safetensors), validated against a ModelConfig.

Loading (checkpoint.load_weights) checks every expected key, its shape and that the values are finite, and
names the first problem. Files are read through harness.model.checkpoint (prefix detection, BF16, extra
tensors ignored).
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..core.errors import WeightsError
from .config import ModelConfig

__all__ = ["weights_digest", "tensor_digest", "combine_digests", "expected_shapes", "read_safetensors",
           "save_weights", "random_weights"]

_BRANCH_ADALN = {"self_attn": "adaln_modulation_self_attn", "cross_attn": "adaln_modulation_cross_attn",
                 "ffn": "adaln_modulation_mlp"}


def block_keys(cfg: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    d, hd, r, c, f = cfg.width, cfg.head_dim, cfg.adaln_lora_rank, cfg.text_emb_dim, cfg.ffn_hidden
    p = f"blocks.{i}."
    shapes: dict[str, tuple[int, ...]] = {}
    for proj in ("q_proj", "k_proj", "v_proj", "output_proj"):
        shapes[p + f"self_attn.{proj}.weight"] = (d, d)
    shapes[p + "cross_attn.q_proj.weight"] = (d, d)
    shapes[p + "cross_attn.k_proj.weight"] = (d, c)
    shapes[p + "cross_attn.v_proj.weight"] = (d, c)
    shapes[p + "cross_attn.output_proj.weight"] = (d, d)
    for attn in ("self_attn", "cross_attn"):
        shapes[p + f"{attn}.q_norm.weight"] = (hd,)
        shapes[p + f"{attn}.k_norm.weight"] = (hd,)
    shapes[p + "mlp.layer1.weight"] = (f, d)
    shapes[p + "mlp.layer2.weight"] = (d, f)
    for name in _BRANCH_ADALN.values():
        shapes[p + f"{name}.1.weight"] = (r, d)
        shapes[p + f"{name}.2.weight"] = (3 * d, r)
    return shapes


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every key of the public checkpoint layout (docs/architecture.md section 1) with its shape."""
    d, r = cfg.width, cfg.adaln_lora_rank
    shapes = {
        "x_embedder.proj.1.weight": (d, cfg.patch_features),
        "t_embedder.1.linear_1.weight": (d, d),
        "t_embedder.1.linear_2.weight": (3 * d, d),
        "t_embedding_norm.weight": (d,),
    }
    for i in range(cfg.blocks):
        shapes.update(block_keys(cfg, i))
    shapes["final_layer.adaln_modulation.1.weight"] = (r, d)
    shapes["final_layer.adaln_modulation.2.weight"] = (2 * d, r)
    shapes["final_layer.linear.weight"] = (cfg.out_features, d)
    return shapes


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a safetensors file as numpy arrays; a clear error if it is not one."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"{path}: weights file not found")
    try:
        return load_file(str(path))
    except (SafetensorError, ValueError, OSError) as exc:
        raise WeightsError(f"{path}: not a readable safetensors file ({exc})") from None


def save_weights(tensors: dict[str, np.ndarray], path: str | Path, metadata: dict | None = None) -> None:
    from safetensors.numpy import save_file

    from ..core.atomic import atomic_path
    with atomic_path(path) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp), metadata=metadata)


def random_weights(cfg: ModelConfig, seed: int = 0, blocks: range | None = None) -> dict[str, np.ndarray]:
    """Random weights in the public layout (linear ~ N(0, 1/fan_in), norms ~ 1).

    `blocks` limits which blocks get tensors, so a full-width anima-2b block can be tested without
    materialising 2B parameters.
    """
    rng = np.random.default_rng(seed)
    keep = set(range(cfg.blocks)) if blocks is None else set(blocks)
    out = {}
    for key, shape in expected_shapes(cfg).items():
        if key.startswith("blocks.") and int(key.split(".")[1]) not in keep:
            continue
        if len(shape) == 1:
            out[key] = (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
        else:
            out[key] = (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[1])).astype(np.float32)
    return out


def tensor_digest(key: str, value: np.ndarray) -> bytes:
    """sha256 of one tensor as float32 little-endian, with its key and shape."""
    value = np.ascontiguousarray(np.asarray(value, dtype="<f4"))
    h = hashlib.sha256(f"{key}:{list(value.shape)};".encode())
    h.update(value.data.cast("B"))
    return h.digest()


def combine_digests(per_tensor: dict[str, bytes]) -> str:
    """The weights digest: per-tensor digests in sorted key order. Per tensor, so a streamed export can
    hash each tensor as it reads it, in any order, and still match a digest of the whole dict."""
    h = hashlib.sha256()
    for key in sorted(per_tensor):
        h.update(per_tensor[key])
    return h.hexdigest()


def weights_digest(weights: Mapping) -> str:
    """sha256 over the tensors (per-tensor float32 digests in sorted key order): independent of the
    file layout and the stored dtype, and computable one tensor at a time."""
    return combine_digests({key: tensor_digest(key, value) for key, value in weights.items()})
