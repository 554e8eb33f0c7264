"""PNG in and out for float images in [0, 1]; deterministic bytes (no timestamps in the file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .atomic import atomic_path

__all__ = ["to_uint8", "save_png", "load_png"]


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
