"""Builders shared by tests: model directories with random weights in the real file layout."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from harness.config import EMBEDDED_DIR, load_model_dir
from harness.model.embedded import PROMPT_KEYS
from harness.weights import random_weights, save_weights

__all__ = ["make_random_model_dir", "fake_quantize_ffn", "copy_model_dir"]


def make_random_model_dir(target: Path, seed: int = 0) -> Path:
    """A copy of the embedded model's model.toml with random DiT and prompt-encoder weights."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(EMBEDDED_DIR / "model.toml", target / "model.toml")
    cfg = load_model_dir(target)
    save_weights(random_weights(cfg, seed=seed), target / cfg.files["weights"])
    rng = np.random.default_rng(seed + 1)
    vocab = len(cfg.prompt["vocab"])
    save_weights({
        PROMPT_KEYS[0]: rng.standard_normal((vocab, cfg.context_dim)).astype(np.float32),
        PROMPT_KEYS[1]: rng.standard_normal((cfg.context_tokens, cfg.context_dim)).astype(np.float32),
    }, target / cfg.files["prompt_encoder"])
    return target


def fake_quantize_ffn(weights: dict, bits: int = 8) -> dict:
    """Weight-only symmetric per-output-channel fake quantisation of every FFN linear.

    The board tried FFN W8A8 and it failed the image-quality threshold; this reproduces the weight
    half of that loss in FP32 so the quality gate can be shown to catch it off-board.
    """
    qmax = 2 ** (bits - 1) - 1
    out = dict(weights)
    for key, w in weights.items():
        if ".mlp.layer" in key:
            scale = np.abs(w).max(axis=1, keepdims=True) / qmax
            scale[scale == 0] = 1.0
            out[key] = (np.round(w / scale) * scale).astype(np.float32)
    return out


def copy_model_dir(source: Path, target: Path, weights: dict | None = None) -> Path:
    """A model directory like `source`, optionally with other DiT weights."""
    shutil.copytree(source, target, dirs_exist_ok=True)
    if weights is not None:
        cfg = load_model_dir(target)
        save_weights(weights, target / cfg.files["weights"])
    return target
