"""The host's float16 casts through onnxruntime give numpy's bits for every class of value."""
import numpy as np
import pytest

from harness.runtime.casts import ORT_CAST_ELEMENTS, cast


def _every_class(n: int) -> np.ndarray:
    """Random float32 bit patterns (all exponents: float16 subnormals, normals, overflow) without NaN,
    plus the edges: signed zeros, infinities, the float16 overflow threshold and ties."""
    bits = np.random.default_rng(0).integers(0, 2 ** 32, size=n, dtype=np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    scaled = np.random.default_rng(1).standard_normal(n, dtype=np.float32) * np.float32(2.0) ** \
        np.random.default_rng(2).integers(-30, 18, size=n).astype(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, -65520.0, 2.0 ** -24,
                      2.0 ** -25, 3 * 2.0 ** -26, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11], np.float32)
    return np.concatenate([edges, x, scaled])


def test_float32_to_float16_is_numpys_rounding():
    x = _every_class(1 << 20)
    assert x.size >= ORT_CAST_ELEMENTS
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = cast(x, np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_float16_to_float32_is_exact():
    every = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    every = every[~np.isnan(every)]
    got = cast(every, np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), every.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("shape", [(3, 5), (2, 1024, 64)])
def test_same_dtype_is_returned_and_small_arrays_cast(shape):
    x = np.random.default_rng(3).standard_normal(shape, dtype=np.float32)
    assert cast(x, np.float32) is x
    np.testing.assert_array_equal(cast(x, "float16"), x.astype(np.float16))
    strided = x[..., ::2]                   # a view that is not contiguous still casts
    np.testing.assert_array_equal(cast(strided, np.float16), strided.astype(np.float16))
