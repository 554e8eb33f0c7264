"""PNG in and out for float images in [0, 1]; deterministic bytes (no timestamps in the file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .atomic import atomic_path
from .errors import ManifestError

__all__ = ["to_uint8", "save_png", "load_png", "as_rgb"]


def to_uint8(image: np.ndarray) -> np.ndarray:
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def save_png(image: np.ndarray, path: str | Path) -> None:
    from PIL import Image
    with atomic_path(path) as tmp:
        Image.fromarray(to_uint8(image)).save(tmp, format="PNG")


def load_png(path: str | Path) -> np.ndarray:
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0


def as_rgb(out: np.ndarray, value_range, entry) -> np.ndarray:
    """[H, W, 3], [3, H, W] or either with unit axes ([1, H, W, 3] from the exported decoder,
    [1, 3, 1, H, W] from a video VAE) -> [H, W, 3] in [0, 1], mapping `value_range` (model.toml
    [decoder] output_range) onto [0, 1]."""
    image = np.squeeze(out)
    if image.ndim == 3 and image.shape[0] == 3 and image.shape[-1] != 3:
        image = image.transpose(1, 2, 0)
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ManifestError(f"{entry.label} ({entry.file}) returned {list(out.shape)}; expected an RGB image "
                            "[H, W, 3] or [3, H, W] (unit axes allowed)")
    lo, hi = (float(v) for v in value_range)
    return np.clip((image - lo) / (hi - lo), 0.0, 1.0).astype(np.float32)
