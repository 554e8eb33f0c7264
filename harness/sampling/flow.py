"""Discrete-flow sampling as Anima runs it (docs/architecture.md section 4): shift-3 schedule, Euler, CFG.

The sampler only sees a `velocity(x, sigma) -> {stream: v}` callable, so the monolithic reference
and the partitioned pipeline are sampled by the same code.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["flow_sigmas", "initial_noise", "cfg_mix", "denoise"]


def flow_sigmas(steps: int, shift: float) -> np.ndarray:
    """steps+1 noise levels from 1 to 0: sigma(s) = shift*s / (1 + (shift-1)*s), s = 1 .. 0."""
    s = np.linspace(1.0, 0.0, steps + 1, dtype=np.float64)
    return (shift * s / (1.0 + (shift - 1.0) * s)).astype(np.float32)


def initial_noise(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The fixed-seed starting latent: the same seed gives the same image on every machine."""
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


def cfg_mix(v_cond: np.ndarray, v_uncond: np.ndarray, scale: float) -> np.ndarray:
    return v_uncond + np.float32(scale) * (v_cond - v_uncond)


def euler_step(x: np.ndarray, v: np.ndarray, sigma: float, sigma_next: float) -> np.ndarray:
    return x + np.float32(sigma_next - sigma) * v


def denoise(velocity: Callable[[np.ndarray, float, int], dict], noise: np.ndarray, steps: int,
            shift: float, cfg_scale: float, on_step: Callable[[int], None] | None = None) -> np.ndarray:
    """Euler over the flow schedule; `velocity(x, sigma, step)` returns {"cond": v[, "uncond": v]}."""
    sigmas = flow_sigmas(steps, shift)
    x = noise.astype(np.float32)
    for i in range(steps):
        v = velocity(x, float(sigmas[i]), i)
        mixed = cfg_mix(v["cond"], v["uncond"], cfg_scale) if "uncond" in v else v["cond"]
        x = euler_step(x, mixed, float(sigmas[i]), float(sigmas[i + 1]))
        if on_step is not None:
            on_step(i)
    return x
