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

__all__ = ["sample_settings", "stream_contexts", "initial_latents", "sample_reference", "text_emb_streams"]


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


def text_emb_streams(bundle: ModelBundle, cond_path, uncond_path, cfg_scale: float) -> dict:
    """{stream: [1, L, C]} from text-embedding .npy files (a model without a prompt encoder here).

    CFG 1 runs the cond stream alone. Otherwise the uncond stream comes from its file, or from the
    prompt encoder's empty prompt when the model has one.
    """
    from .errors import ConfigError
    from .model.bundle import check_text_emb
    streams = {"cond": _load_text_emb(bundle, cond_path, "--text-emb")}
    if cfg_scale == 1.0:
        return streams
    if uncond_path is not None:
        streams["uncond"] = _load_text_emb(bundle, uncond_path, "--uncond-text-emb")
    elif bundle.encoder is not None:
        streams["uncond"] = check_text_emb(bundle.context(""), bundle.cfg, "prompt encoder")
    else:
        raise ConfigError(f"--cfg {cfg_scale:g} mixes an unconditional stream: give --uncond-text-emb FILE "
                          f"(the text embedding of the empty prompt), or run one stream with --cfg 1")
    return streams


def _load_text_emb(bundle: ModelBundle, path, option: str) -> np.ndarray:
    from .errors import ConfigError
    from .model.bundle import check_text_emb
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(f"{option} {path}: not a readable .npy array file ({type(exc).__name__})") from None
    return check_text_emb(array, bundle.cfg, f"{option} {path}")


def initial_latents(bundle: ModelBundle, seeds: Sequence[int]) -> np.ndarray:
    return np.concatenate([initial_noise((1, *bundle.latent_shape), s) for s in seeds])


def sample_reference(bundle: ModelBundle, prompts: Sequence[str], seeds: Sequence[int], steps: int,
                     cfg_scale: float, shift: float,
                     on_step: Callable[[int], None] | None = None, contexts: dict | None = None) -> np.ndarray:
    """Final latents [B, C, H, W] from the monolithic reference forward; `contexts`
    ({stream: [B, L, C]} text embeddings) replaces the prompts for a model without a prompt encoder."""
    contexts = contexts or stream_contexts(bundle, prompts, cfg_scale)
    streams = list(contexts)
    ctx = np.concatenate([contexts[s] for s in streams])
    n = len(seeds)
    weights = bundle.all_weights()

    def velocity(x, sigma, step):
        v = reference.forward(weights, bundle.cfg, np.concatenate([x] * len(streams)), sigma, ctx)
        return {s: v[k * n:(k + 1) * n] for k, s in enumerate(streams)}

    return denoise(velocity, initial_latents(bundle, seeds), steps, shift, cfg_scale, on_step)
