"""The embedded model's prompt accuracy: the share of prompted samples that a classifier trained on the
real digits reads as the prompted digit (the README's sample-grid figure, tests/unit/test_embedded_model.py).

Each digit is prompted as "a handwritten digit <word>" with seeds 0..per_digit-1, rendered by the
monolithic FP32 reference in one batch, row by row.
"""
from __future__ import annotations

import numpy as np

from ..model.bundle import ModelBundle
from ..model.embedded import DIGIT_WORDS, digit_classifier, latents_to_digits_features
from .reference_run import sample_reference
from .settings import SampleSettings


def prompted_latents(bundle: ModelBundle, per_digit: int, cfg_scale: float, steps: int = 20):
    """(latents [10 * per_digit, C, H, W], prompted digit of each): the grid's samples, row by row."""
    prompts = [f"a handwritten digit {DIGIT_WORDS[d]}" for d in range(10) for _ in range(per_digit)]
    seeds = [s for _ in range(10) for s in range(per_digit)]
    latents = sample_reference(bundle, prompts, seeds, SampleSettings(steps, cfg_scale, 3.0, seeds[0]))
    return latents, np.repeat(np.arange(10), per_digit)


def grade(latents: np.ndarray, labels: np.ndarray):
    """(share of samples the classifier reads as the prompted digit, its reading of each)."""
    predicted = digit_classifier().predict(latents_to_digits_features(latents))
    return float((predicted == labels).mean()), predicted
