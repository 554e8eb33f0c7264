"""Text -> latent -> image with the monolithic FP32 reference (the partitioned pipeline mirrors it).

Batches are a convenience for tests: sample k of a batch starts from `initial_noise(seed_k)`, exactly
as a single run with that seed does, and cond/uncond run as one batch of 2B.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..core.errors import ConfigError
from ..model import reference
from ..model.bundle import ModelBundle
from .flow import denoise, initial_noise
from .settings import SampleSettings
from .spectrum import DEFAULT_PRESET, PRESETS, SpectrumParams, check_params, sampler_velocity

__all__ = ["sample_settings", "stream_text_embs", "initial_latents", "sample_reference", "text_emb_streams"]


def sample_settings(bundle: ModelBundle, steps=None, cfg_scale=None, shift=None, seed=None,
                    sampler: str = "flow-euler", spectrum: SpectrumParams | None = None) -> SampleSettings:
    """Run settings: explicit values win, the model's [sampler] table fills the rest. A Spectrum
    run carries its parameters (checked against the steps here, before anything runs)."""
    s = bundle.cfg.sampler
    steps = int(steps if steps is not None else s.get("steps", 20))
    params = None
    if sampler == "spectrum":
        params = spectrum or PRESETS[DEFAULT_PRESET]
        check_params(params, steps)
    return SampleSettings(steps=steps, cfg_scale=float(cfg_scale if cfg_scale is not None else s.get("cfg", 4.0)),
                          shift=float(shift if shift is not None else s.get("shift", 3.0)),
                          seed=int(seed if seed is not None else s.get("seed", 0)), sampler=sampler,
                          spectrum=params.as_dict() if params else None)


def stream_text_embs(bundle: ModelBundle, prompts: Sequence[str], cfg_scale: float) -> dict:
    """{stream: [B, L, C]}; the uncond stream (empty prompt) only when CFG actually mixes it."""
    cond = np.stack([bundle.text_emb(p) for p in prompts])
    if cfg_scale == 1.0:
        return {"cond": cond}
    uncond = np.broadcast_to(bundle.text_emb(""), cond.shape).copy()
    return {"cond": cond, "uncond": uncond}


def text_emb_streams(bundle: ModelBundle, cond_path, uncond_path, cfg_scale: float) -> dict:
    """{stream: [1, L, C]} from text-embedding .npy files (a model without a prompt encoder here).

    CFG 1 runs the cond stream alone. Otherwise the uncond stream comes from its file, or from the
    prompt encoder's empty prompt when the model has one.
    """
    from ..model.bundle import check_text_emb
    streams = {"cond": _load_text_emb(bundle, cond_path, "--text-emb")}
    if cfg_scale == 1.0:
        return streams
    if uncond_path is not None:
        streams["uncond"] = _load_text_emb(bundle, uncond_path, "--uncond-text-emb")
    elif bundle.encoder is not None:
        streams["uncond"] = check_text_emb(bundle.text_emb(""), bundle.cfg, "prompt encoder")
    else:
        raise ConfigError(f"--cfg {cfg_scale:g} mixes an unconditional stream: give --uncond-text-emb FILE "
                          f"(the text embedding of the empty prompt), or run one stream with --cfg 1")
    return streams


def _load_text_emb(bundle: ModelBundle, path, option: str) -> np.ndarray:
    from ..model.bundle import check_text_emb
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(f"{option} {path}: not a readable .npy array file ({type(exc).__name__})") from None
    return check_text_emb(array, bundle.cfg, f"{option} {path}")


def initial_latents(bundle: ModelBundle, seeds: Sequence[int]) -> np.ndarray:
    return np.concatenate([initial_noise((1, *bundle.latent_shape), s) for s in seeds])


class ReferenceModel:
    """The monolithic forward, split where Spectrum needs it: all blocks -> last hidden state per
    stream, and the final layer on a given hidden state. Streams are batched along axis 0."""

    def __init__(self, bundle: ModelBundle, text_embs: dict, batch: int):
        self.bundle = bundle
        self.streams = list(text_embs)
        self.text_emb = np.concatenate([text_embs[s] for s in self.streams])
        self.n = batch
        self.weights = bundle.all_weights()     # the monolithic forward needs every tensor

    def hidden_state(self, x, sigma, step) -> dict:
        h, _, _ = reference.forward_features(self.weights, self.bundle.cfg,
                                             np.concatenate([x] * len(self.streams)), sigma, self.text_emb)
        return {s: h[k * self.n:(k + 1) * self.n] for k, s in enumerate(self.streams)}

    def final_velocity(self, hidden: dict, sigma, step, latent_hw) -> dict:
        w, cfg = self.weights, self.bundle.cfg
        x = np.concatenate([hidden[s] for s in self.streams])
        emb, lora = reference.time_embedding(w, cfg, np.full(x.shape[0], sigma, np.float32))
        v = reference.final_layer(w, cfg, x, emb, lora, latent_hw)
        return {s: v[k * self.n:(k + 1) * self.n] for k, s in enumerate(self.streams)}

    def velocity(self, x, sigma, step) -> dict:
        return self.final_velocity(self.hidden_state(x, sigma, step), sigma, step, x.shape[-2:])


def sample_reference(bundle: ModelBundle, prompts: Sequence[str], seeds: Sequence[int], settings: SampleSettings,
                     on_step: Callable[[int], None] | None = None, text_embs: dict | None = None) -> np.ndarray:
    """Final latents [B, C, H, W] from the monolithic reference forward under `settings` (steps, CFG,
    shift and sampler; `seeds` give each image its own); `text_embs` ({stream: [B, L, C]} text
    embeddings) replace the prompts for a model without a prompt encoder."""
    s = settings
    model = ReferenceModel(bundle, text_embs or stream_text_embs(bundle, prompts, s.cfg_scale), len(seeds))
    velocity, _ = sampler_velocity(model, s)
    return denoise(velocity, initial_latents(bundle, seeds), s.steps, s.shift, s.cfg_scale, on_step)
