"""Text -> latent -> image with the monolithic FP32 reference (the partitioned pipeline mirrors it).

Batches are a convenience for tests: sample k of a batch starts from `initial_noise(seed_k)`, exactly
as a single run with that seed does, and cond/uncond run as one batch of 2B.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .model import reference
from .model.bundle import ModelBundle
from .sampler import denoise, initial_noise

__all__ = ["sample_settings", "stream_contexts", "initial_latents", "sample_reference"]


def sample_settings(bundle: ModelBundle, steps=None, cfg_scale=None, shift=None, seed=None) -> dict:
    """Run settings: explicit values win, the model's [sampler] table fills the rest."""
    s = bundle.cfg.sampler
    return {
        "steps": int(steps if steps is not None else s.get("steps", 20)),
        "cfg_scale": float(cfg_scale if cfg_scale is not None else s.get("cfg", 4.0)),
        "shift": float(shift if shift is not None else s.get("shift", 3.0)),
        "seed": int(seed if seed is not None else s.get("seed", 0)),
    }


def stream_contexts(bundle: ModelBundle, prompts: Sequence[str], cfg_scale: float) -> dict:
    """{stream: [B, L, C]}; the uncond stream (empty prompt) only when CFG actually mixes it."""
    cond = np.stack([bundle.context(p) for p in prompts])
    if cfg_scale == 1.0:
        return {"cond": cond}
    uncond = np.broadcast_to(bundle.context(""), cond.shape).copy()
    return {"cond": cond, "uncond": uncond}


def initial_latents(bundle: ModelBundle, seeds: Sequence[int]) -> np.ndarray:
    return np.concatenate([initial_noise((1, *bundle.latent_shape), s) for s in seeds])


def sample_reference(bundle: ModelBundle, prompts: Sequence[str], seeds: Sequence[int], steps: int,
                     cfg_scale: float, shift: float,
                     on_step: Callable[[int], None] | None = None) -> np.ndarray:
    """Final latents [B, C, H, W] from the monolithic reference forward."""
    contexts = stream_contexts(bundle, prompts, cfg_scale)
    streams = list(contexts)
    ctx = np.concatenate([contexts[s] for s in streams])
    n = len(prompts)
    weights = bundle.all_weights()

    def velocity(x, sigma, step):
        v = reference.forward(weights, bundle.cfg, np.concatenate([x] * len(streams)), sigma, ctx)
        return {s: v[k * n:(k + 1) * n] for k, s in enumerate(streams)}

    return denoise(velocity, initial_latents(bundle, seeds), steps, shift, cfg_scale, on_step)
