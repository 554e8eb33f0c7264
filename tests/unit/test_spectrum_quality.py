"""On the embedded model: the Spectrum 28-step image (13-of-28 preset) against the full 28-step image,
through the monolithic FP32 reference (the partitioned Spectrum run matches it: test_spectrum_run.py).

The threshold is data (`spectrum_ssim_min` in the model's [gates]) chosen from measurement; see
models/embedded/model.toml for the figures. Images stay the prompted digit (the classifier of
test_embedded_model.py reads them).
"""
import dataclasses

import numpy as np
import pytest

from harness.gates.quality import compare
from harness.model.bundle import load_bundle
from harness.model.config import EMBEDDED_DIR
from harness.sampling.reference_run import sample_reference, sample_settings

pytestmark = pytest.mark.slow

PROMPTS = ["a handwritten digit seven", "the number 3", "digit zero"]     # the golden cases' prompts
SEEDS = [1, 2, 3]
DIGITS = [7, 3, 0]


@pytest.fixture(scope="module")
def bundle():
    return load_bundle(EMBEDDED_DIR)


def test_spectrum_28_steps_is_close_to_the_full_28_step_image(bundle):
    from harness.model.embedded import digit_classifier, latents_to_digits_features
    threshold = float(bundle.cfg.raw_gates["spectrum_ssim_min"])
    s = sample_settings(bundle, steps=28, sampler="spectrum")
    full = sample_reference(bundle, PROMPTS, SEEDS, dataclasses.replace(s, sampler="flow-euler", spectrum=None))
    spectrum = sample_reference(bundle, PROMPTS, SEEDS, s)
    ssim = [compare(bundle.decode(a), bundle.decode(b)).ssim for a, b in zip(spectrum, full)]
    print("Spectrum 13-of-28 vs full 28 steps, SSIM per image: " + ", ".join(f"{v:.4f}" for v in ssim)
          + f" (gate {threshold})")
    assert min(ssim) >= threshold
    predicted = digit_classifier().predict(latents_to_digits_features(spectrum))
    assert list(predicted) == DIGITS
    assert not np.array_equal(spectrum, full)
