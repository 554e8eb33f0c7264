"""SSIM / PSNR / diff figure on real arrays with scikit-image and matplotlib (no mocks)."""
import json
import math

import numpy as np
import pytest

from harness.core.imageio import load_png
from harness.gates.quality import ImageMismatch, QualityResult, compare, diff_figure, diff_map


def _image(seed: int = 0, shape=(64, 64, 3)) -> np.ndarray:
    # Smooth structure plus texture, like a decoded digit: SSIM needs local variance to mean anything.
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:shape[0], 0:shape[1]] / shape[0]
    base = 0.5 + 0.4 * np.sin(6 * xx + 3 * yy)[..., None] * np.array([1.0, 0.8, 0.6])
    return np.clip(base + 0.05 * rng.standard_normal(shape), 0, 1).astype(np.float32)


def test_identical_images_give_ssim_one_and_infinite_psnr():
    image = _image()
    result = compare(image, image.copy())
    assert result.ssim == pytest.approx(1.0, abs=1e-12)
    assert math.isinf(result.psnr) and result.psnr > 0
    assert result.max_abs_diff == 0.0
    assert result.passes(0.9999, 50.0)


def test_inf_psnr_survives_strict_json():
    data = compare(_image(), _image()).to_json()
    text = json.dumps(data, allow_nan=False)    # raises on a bare float('inf')
    assert math.isinf(QualityResult.from_json(json.loads(text)).psnr)


def test_noise_lowers_ssim_and_psnr_in_order():
    golden = _image()
    rng = np.random.default_rng(1)
    small = np.clip(golden + 1e-3 * rng.standard_normal(golden.shape), 0, 1).astype(np.float32)
    large = np.clip(golden + 5e-2 * rng.standard_normal(golden.shape), 0, 1).astype(np.float32)
    r_small, r_large = compare(small, golden), compare(large, golden)
    assert 0.99 < r_small.ssim < 1.0
    assert r_large.ssim < r_small.ssim - 0.05
    assert r_large.psnr < r_small.psnr
    assert not r_large.passes(0.9999, 50.0)
    assert r_large.max_abs_diff == pytest.approx(float(np.max(np.abs(large - golden))), rel=1e-6)


def test_data_range_is_one_not_guessed_from_dtype():
    # skimage guesses data_range 2 for floats; a known shift of 0.1 gives MSE 0.01 -> 20 dB at range 1.
    golden = np.full((16, 16, 3), 0.5, dtype=np.float32)
    assert compare(golden + np.float32(0.1), golden).psnr == pytest.approx(20.0, abs=1e-3)


@pytest.mark.parametrize("obtained, golden, fragment", [
    (np.zeros((64, 64, 3)), np.zeros((32, 32, 3)), "differs from golden shape"),
    (np.zeros((64, 64)), np.zeros((64, 64)), "expected [H, W, 3]"),
    (np.zeros((4, 4, 3)), np.zeros((4, 4, 3)), "smaller than"),
    (np.full((8, 8, 3), np.nan), np.zeros((8, 8, 3)), "NaN/Inf"),
    (np.zeros((8, 8, 3), dtype=np.uint8), np.zeros((8, 8, 3)), "expected float"),
])
def test_bad_pairs_raise_one_clear_error(obtained, golden, fragment):
    with pytest.raises(ImageMismatch) as info:
        compare(obtained, golden)
    assert fragment in str(info.value)


def test_diff_map_sums_abs_difference_over_channels():
    golden = np.zeros((8, 8, 3), dtype=np.float32)
    obtained = golden.copy()
    obtained[2, 3] = [0.1, -0.2, 0.3]
    diff = diff_map(obtained, golden)
    assert diff.shape == (8, 8)
    assert diff[2, 3] == pytest.approx(0.6)
    assert diff.sum() == pytest.approx(0.6)


def test_diff_figure_writes_a_loadable_png(tmp_path):
    golden = _image()
    obtained = golden.copy()
    obtained[20:30, 20:30] = 1.0
    path = diff_figure(obtained, golden, tmp_path / "fail" / "seven.png", "case 'seven' on onnxruntime")
    assert path.stat().st_size > 1000
    picture = load_png(path)
    assert picture.shape[0] >= 300 and picture.shape[1] >= 800    # three panels side by side
    assert picture.std() > 0.05                                     # not a blank canvas
    assert sorted(p.name for p in path.parent.iterdir()) == ["seven.png"]   # no temp left behind
