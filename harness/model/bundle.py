"""A model directory loaded for running: config, validated DiT weights, prompt encoder, decoder."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import ModelConfig, load_model_dir
from ..errors import ConfigError
from ..weights import load_weights
from .embedded import PromptEncoder, decode

__all__ = ["ModelBundle", "load_bundle"]


@dataclass
class ModelBundle:
    cfg: ModelConfig
    weights: dict
    encoder: PromptEncoder | None
    model_dir: Path

    def context(self, prompt: str) -> np.ndarray:
        if self.encoder is None:
            raise ConfigError(f"model {self.cfg.name} has no prompt encoder here ({self.model_dir}); "
                              "give its golden cases a text-context file instead of a prompt")
        return self.encoder.encode(prompt)

    def decode(self, latent: np.ndarray) -> np.ndarray:
        d = self.cfg.decoder
        return decode(latent, int(d.get("scale", 4)), d.get("background", [0, 0, 0]),
                      d.get("foreground", [1, 1, 1]))

    @functools.cached_property
    def digest(self) -> str:
        """sha256 of the DiT weights as a partition manifest records them (weights_sha256)."""
        from ..weights import weights_digest
        return weights_digest(self.weights)

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        return (self.cfg.latent_channels, *self.cfg.latent_size)


def load_bundle(model_dir: str | Path) -> ModelBundle:
    model_dir = Path(model_dir)
    cfg = load_model_dir(model_dir)
    if "weights" not in cfg.files:
        raise ConfigError(f"{cfg.source}: missing 'weights' (file name of the DiT weights)")
    weights = load_weights(model_dir / cfg.files["weights"], cfg)
    # Anima's text encoder (Qwen3 + adapter) does not run here: without `prompt_encoder` the model
    # takes precomputed contexts (golden cases with `context` files).
    encoder = (PromptEncoder.from_file(model_dir / cfg.files["prompt_encoder"], cfg.prompt.get("vocab", []))
               if "prompt_encoder" in cfg.files else None)
    return ModelBundle(cfg, weights, encoder, model_dir)
