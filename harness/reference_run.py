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
from .spectrum import DEFAULT_PRESET, PRESETS, SpectrumParams, check_params, sampler_velocity

__all__ = ["sample_settings", "stream_contexts", "initial_latents", "sample_reference", "ReferenceModel"]


def sample_settings(bundle: ModelBundle, steps=None, cfg_scale=None, shift=None, seed=None,
                    sampler: str = "flow-euler", spectrum: SpectrumParams | None = None) -> dict:
    """Run settings: explicit values win, the model's [sampler] table fills the rest. A Spectrum
    run carries its parameters (checked against the steps here, before anything runs)."""
    s = bundle.cfg.sampler
    settings = {
        "steps": int(steps if steps is not None else s.get("steps", 20)),
        "cfg_scale": float(cfg_scale if cfg_scale is not None else s.get("cfg", 4.0)),
        "shift": float(shift if shift is not None else s.get("shift", 3.0)),
        "seed": int(seed if seed is not None else s.get("seed", 0)),
        "sampler": sampler,
    }
    if sampler == "spectrum":
        params = spectrum or PRESETS[DEFAULT_PRESET]
        check_params(params, settings["steps"])
        settings["spectrum"] = params.as_dict()
    return settings


def stream_contexts(bundle: ModelBundle, prompts: Sequence[str], cfg_scale: float) -> dict:
    """{stream: [B, L, C]}; the uncond stream (empty prompt) only when CFG actually mixes it."""
    cond = np.stack([bundle.context(p) for p in prompts])
    if cfg_scale == 1.0:
        return {"cond": cond}
    uncond = np.broadcast_to(bundle.context(""), cond.shape).copy()
    return {"cond": cond, "uncond": uncond}


def initial_latents(bundle: ModelBundle, seeds: Sequence[int]) -> np.ndarray:
    return np.concatenate([initial_noise((1, *bundle.latent_shape), s) for s in seeds])


class ReferenceModel:
    """The monolithic forward, split where Spectrum needs it: all blocks -> last hidden state per
    stream, and the final layer on a given hidden state. Streams are batched along axis 0."""

    def __init__(self, bundle: ModelBundle, contexts: dict, batch: int):
        self.bundle = bundle
        self.streams = list(contexts)
        self.context = np.concatenate([contexts[s] for s in self.streams])
        self.n = batch

    def hidden_state(self, x, sigma, step) -> dict:
        h, _, _ = reference.forward_features(self.bundle.weights, self.bundle.cfg,
                                             np.concatenate([x] * len(self.streams)), sigma, self.context)
        return {s: h[k * self.n:(k + 1) * self.n] for k, s in enumerate(self.streams)}

    def final_velocity(self, hidden: dict, sigma, step, latent_hw) -> dict:
        w, cfg = self.bundle.weights, self.bundle.cfg
        x = np.concatenate([hidden[s] for s in self.streams])
        emb, lora = reference.time_embedding(w, cfg, np.full(x.shape[0], sigma, np.float32))
        v = reference.final_layer(w, cfg, x, emb, lora, latent_hw)
        return {s: v[k * self.n:(k + 1) * self.n] for k, s in enumerate(self.streams)}

    def velocity(self, x, sigma, step) -> dict:
        return self.final_velocity(self.hidden_state(x, sigma, step), sigma, step, x.shape[-2:])


def sample_reference(bundle: ModelBundle, prompts: Sequence[str], seeds: Sequence[int], steps: int,
                     cfg_scale: float, shift: float,
                     on_step: Callable[[int], None] | None = None, settings: dict | None = None) -> np.ndarray:
    """Final latents [B, C, H, W] from the monolithic reference forward; `settings` (from
    sample_settings) choose the sampler, flow-euler when not given."""
    model = ReferenceModel(bundle, stream_contexts(bundle, prompts, cfg_scale), len(prompts))
    velocity, _ = sampler_velocity(model, {**(settings or {}), "steps": steps})
    return denoise(velocity, initial_latents(bundle, seeds), steps, shift, cfg_scale, on_step)
