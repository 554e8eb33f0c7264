"""The golden image store (the cases it holds goldens for are read by cases.py).

Per case the store holds three files beside each other:
  <name>.npy   float32 [H, W, 3] image: the data the gate compares (an 8-bit PNG would round away the
               FP16-level differences the gate is there to see)
  <name>.png   the same image for people
  <name>.json  who/what/when: user, host, UTC time, backend, precision, versions, manifest hash, case
               settings, and the sha256 of the .npy image
Each file is written atomically; the .json goes last and carries the image hash, so an update killed
between files is caught on the next load (hash mismatch) instead of comparing against a half-update.
Goldens are reference-precision images (FP16, what the board runs, or FP32): writing one from a
quantised run would make the gate measure against the thing it should catch, so that needs force=True.
"""
from __future__ import annotations

import getpass
import hashlib
import json
import math
import os
import socket
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from .. import __version__
from ..core.atomic import atomic_path, atomic_write_json
from ..core.errors import ConfigError, HarnessError
from ..core.imageio import save_png, to_uint8
from ..model.config import REPO_ROOT
from ..sampling.spectrum import SAMPLERS  # sampler names live with the sampler
from .cases import IMAGE_SETTINGS, GoldenCase

__all__ = ["relative_to_repo", "GoldenStore", "GoldenError", "GoldenMissing", "GoldenCorrupt", "GoldenStale",
           "GoldenRefused", "UPDATE_COMMAND", "SAMPLERS", "latent_preview"]


UPDATE_COMMAND = "pytest -m quality --update-goldens"
REFERENCE_PRECISIONS = ("float16", "float32")
KINDS = ("image", "latent")     # what a golden holds: a decoded image, or the final latent (no decoder)


class GoldenError(HarnessError):
    """A golden case or golden file is wrong."""


class GoldenMissing(GoldenError):
    """No golden image (or its metadata) for a case."""


class GoldenCorrupt(GoldenError):
    """A golden file is unreadable, malformed, or disagrees with its metadata."""


class GoldenStale(GoldenError):
    """The golden was rendered with other settings than the case now asks for."""


class GoldenRefused(GoldenError):
    """A golden write was refused (non-reference precision)."""


# ----------------------------------------------------------------------------- metadata

def relative_to_repo(path: str | Path) -> str:
    """A path as a golden may record it: relative to the repository, else just its last part."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path.name

def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def runtime_versions() -> dict:
    return {"harness": __version__, "numpy": np.__version__,
            "onnxruntime": _version("onnxruntime"), "scikit-image": _version("scikit-image")}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):   # containers without a passwd entry for the uid
        return f"uid {os.getuid()}"


def _image_sha256(image: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(image, dtype=np.float32).tobytes()).hexdigest()


# ----------------------------------------------------------------------------- the store

class GoldenStore:
    """Golden images (or, for a partition without a decoder, final latents [C, H, W]) of one model in
    one directory; `image_shape` (optional) is checked on load. The .json records the kind."""

    def __init__(self, directory: str | Path, image_shape: tuple[int, ...] | None = None, kind: str = "image"):
        if kind not in KINDS:
            raise ConfigError(f"golden kind '{kind}' is unknown (known: {', '.join(KINDS)})")
        self.directory = Path(directory)
        self.image_shape = tuple(image_shape) if image_shape is not None else None
        self.kind = kind

    def paths(self, case: GoldenCase) -> dict[str, Path]:
        return {ext: self.directory / f"{case.name}.{ext}" for ext in ("npy", "png", "json")}

    def load(self, case: GoldenCase) -> tuple[np.ndarray, dict]:
        """(float32 image, metadata); any missing, corrupt, mismatched or stale file raises."""
        paths = self.paths(case)
        for kind in ("npy", "json"):
            if not paths[kind].is_file():
                raise GoldenMissing(
                    f"golden case '{case.name}': {paths[kind]} does not exist. Render and store the "
                    f"goldens with a reference-precision backend: {UPDATE_COMMAND}")
        image = self._read_image(case, paths["npy"])
        meta = self._read_meta(case, paths["json"])
        self._check_consistent(case, image, meta, paths)
        self._check_png(case, image, paths["png"])
        return image, meta

    def _check_png(self, case: GoldenCase, image: np.ndarray, path: Path) -> None:
        """The .png people look at must be the .npy the gate compares: a PNG, pixel for pixel the image
        (or the latent's preview) written with it. An image replaced by hand, or by another format under
        the same name, is refused rather than shown beside a verdict it did not take part in."""
        if not path.exists():
            return      # the people's copy is optional; the gate reads the .npy
        from PIL import Image, UnidentifiedImageError
        try:
            with Image.open(path) as im:
                kind, pixels = im.format, np.asarray(im.convert("RGB"))
        except (OSError, UnidentifiedImageError) as exc:
            raise GoldenCorrupt(f"golden case '{case.name}': {path} is not a readable image ({exc}); "
                                f"regenerate it: {UPDATE_COMMAND}") from None
        if kind != "PNG":
            raise GoldenCorrupt(f"golden case '{case.name}': {path} is a {kind} file, not a PNG; "
                                f"regenerate it: {UPDATE_COMMAND}")
        expected = to_uint8(image if self.kind == "image" else latent_preview(image))
        if pixels.shape != expected.shape or not np.array_equal(pixels, expected):
            raise GoldenCorrupt(f"golden case '{case.name}': {path} does not show {path.with_suffix('.npy').name} "
                                f"(a hand edit or another image); regenerate it: {UPDATE_COMMAND}")

    def _read_image(self, case: GoldenCase, path: Path) -> np.ndarray:
        try:
            image = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise GoldenCorrupt(f"golden case '{case.name}': {path} is not a readable .npy file "
                                f"({exc}); regenerate it: {UPDATE_COMMAND}") from None
        layout_ok = image.ndim == 3 and (self.kind == "latent" or image.shape[-1] == 3)
        if image.dtype != np.float32 or not layout_ok:
            raise GoldenCorrupt(f"golden case '{case.name}': {path} holds {image.dtype} {image.shape}; "
                                f"expected float32 {'[C, H, W]' if self.kind == 'latent' else '[H, W, 3]'}. "
                                f"Regenerate it: {UPDATE_COMMAND}")
        if self.image_shape is not None and image.shape != self.image_shape:
            raise GoldenCorrupt(f"golden case '{case.name}': {path} has shape {image.shape}, the model "
                                f"makes {self.image_shape}. Regenerate it: {UPDATE_COMMAND}")
        if not np.all(np.isfinite(image)):
            raise GoldenCorrupt(f"golden case '{case.name}': {path} contains NaN/Inf")
        return image

    def _read_meta(self, case: GoldenCase, path: Path) -> dict:
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GoldenCorrupt(f"golden case '{case.name}': {path} is not readable JSON ({exc}); "
                                f"regenerate it: {UPDATE_COMMAND}") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("image"), dict) \
                or not isinstance(meta.get("case"), dict) or meta.get("kind") not in KINDS:
            raise GoldenCorrupt(f"golden case '{case.name}': {path} lacks the 'image' and 'case' "
                                f"sections or a 'kind' ({' or '.join(KINDS)}); regenerate it: {UPDATE_COMMAND}")
        kind = meta["kind"]
        if kind != self.kind:
            raise GoldenStale(f"golden case '{case.name}': {path} holds a{'n' if kind == 'image' else ''} "
                              f"{kind} golden, but this partition {'has no' if self.kind == 'latent' else 'has a'} "
                              f"decoder, so the gate compares {self.kind}s; update it: {UPDATE_COMMAND}")
        return meta

    def _check_consistent(self, case: GoldenCase, image: np.ndarray, meta: dict, paths: dict) -> None:
        if meta["image"].get("sha256") != _image_sha256(image):
            raise GoldenCorrupt(f"golden case '{case.name}': {paths['npy']} does not match the sha256 "
                                f"recorded in {paths['json']} (an interrupted update or a hand edit); "
                                f"regenerate it: {UPDATE_COMMAND}")
        recorded = {key: meta["case"].get(key) for key in IMAGE_SETTINGS}
        changed = {k: (recorded[k], v) for k, v in case.settings().items() if recorded[k] != v}
        if changed:
            detail = ", ".join(f"{k}: golden {old!r} vs case {new!r}" for k, (old, new) in changed.items())
            raise GoldenStale(f"golden case '{case.name}': {paths['json']} was rendered with other "
                              f"settings ({detail}); update it: {UPDATE_COMMAND}")

    def check_writable(self, case: GoldenCase, precision: str, force: bool = False) -> str:
        """The precision, or GoldenRefused for a non-reference one without force."""
        if precision not in REFERENCE_PRECISIONS and not force:
            raise GoldenRefused(
                f"golden case '{case.name}': refusing to write a golden from a {precision!r} run; goldens "
                f"are reference images ({' or '.join(REFERENCE_PRECISIONS)}). A quantised golden would "
                "hide the very loss the gate measures. Pass force=True (--force-goldens) to override "
                "deliberately.")
        return precision

    def write(self, case: GoldenCase, image, meta: dict, precision: str, force: bool = False) -> dict:
        """Store the golden image; `meta` must name at least `backend` and `manifest_hash`.

        Returns the full metadata written. Refuses non-reference precisions unless force=True.
        """
        precision = self.check_writable(case, precision, force)
        missing = sorted({"backend", "manifest_hash"} - set(meta))
        if missing:
            raise ConfigError(f"golden case '{case.name}': metadata lacks {missing}")
        absolute = sorted(k for k, v in meta.items() if isinstance(v, str) and os.path.isabs(v))
        if absolute:    # goldens are committed: a path of one machine means nothing on another
            raise ConfigError(f"golden case '{case.name}': metadata {absolute} hold absolute paths; "
                              "goldens record relative paths only (see relative_to_repo)")
        image = self._checked_image(case, image)
        full = {**meta, **self._provenance(case, image, precision, force)}
        paths = self.paths(case)
        with atomic_path(paths["npy"]) as tmp:
            with open(tmp, "wb") as fh:   # a file object: np.save on a path would append '.npy'
                np.save(fh, image, allow_pickle=False)
        save_png(image if self.kind == "image" else latent_preview(image), paths["png"])
        atomic_write_json(paths["json"], full)   # last: its hash vouches for the .npy
        return full

    def update(self, case: GoldenCase, image, meta: dict, precision: str,
               force: bool = False) -> tuple[list[Path], str]:
        """Write the golden unless the stored one is intact and `image` is within the case's
        tolerance of it (an update must not churn goldens that still hold). Returns (files written,
        why)."""
        from .quality import compare
        self.check_writable(case, precision, force)
        try:
            golden, _ = self.load(case)
        except GoldenError as exc:
            reason = f"written ({type(exc).__name__}: the stored golden could not be used)"
        else:
            if self.kind != "image":    # latent goldens: the image tolerance does not apply, always write
                self.write(case, image, meta, precision, force)
                return list(self.paths(case).values()), "written (latent golden)"
            q = compare(np.asarray(image, dtype=np.float32), golden)
            if q.passes(case.ssim_min, case.psnr_min):
                return [], f"left alone: within tolerance of the stored golden ({q.summary()})"
            reason = f"written: the stored golden differs beyond tolerance ({q.summary()})"
        self.write(case, image, meta, precision, force)
        return list(self.paths(case).values()), reason

    def _checked_image(self, case: GoldenCase, image) -> np.ndarray:
        array = np.asarray(image)
        if self.kind == "latent":
            if array.ndim != 3 or not np.issubdtype(array.dtype, np.floating) or not np.all(np.isfinite(array)):
                raise GoldenError(f"golden case '{case.name}': latent is {array.dtype} {array.shape}; "
                                  "expected finite float [C, H, W]")
            return np.ascontiguousarray(array, dtype=np.float32)
        if array.ndim != 3 or array.shape[-1] != 3 or not np.issubdtype(array.dtype, np.floating):
            raise GoldenError(f"golden case '{case.name}': image is {array.dtype} {array.shape}; "
                              "expected float [H, W, 3]")
        if self.image_shape is not None and array.shape != self.image_shape:
            raise GoldenError(f"golden case '{case.name}': image shape {array.shape}, the store expects "
                              f"{self.image_shape}")
        if not np.all(np.isfinite(array)) or array.min() < 0.0 or array.max() > 1.0:
            raise GoldenError(f"golden case '{case.name}': image has values outside [0, 1] or NaN/Inf "
                              f"(min {np.nanmin(array):.4g}, max {np.nanmax(array):.4g})")
        return np.ascontiguousarray(array, dtype=np.float32)

    def _provenance(self, case: GoldenCase, image: np.ndarray, precision: str, force: bool) -> dict:
        return {
            "case": asdict(case),
            "kind": self.kind,
            "precision": precision,
            "forced": bool(force and precision not in REFERENCE_PRECISIONS),
            "image": {"shape": list(image.shape), "dtype": "float32", "sha256": _image_sha256(image)},
            "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "user": _user(),
            "host": socket.gethostname(),
            "versions": runtime_versions(),
        }


def latent_preview(latent: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """A latent [C, H, W] for people: channels tiled in a near-square grid, grey levels scaled by the
    reference's (default: its own) min..max, as an RGB image [rows*H, cols*W, 3] in [0, 1]."""
    latent = np.asarray(latent, dtype=np.float32)
    ref = latent if reference is None else np.asarray(reference, dtype=np.float32)
    lo, hi = float(ref.min()), float(ref.max())
    c, h, w = latent.shape
    cols = int(math.ceil(math.sqrt(c)))
    rows = int(math.ceil(c / cols))
    grid = np.zeros((rows * h, cols * w), dtype=np.float32)
    for k in range(c):
        r, q = divmod(k, cols)
        grid[r * h:(r + 1) * h, q * w:(q + 1) * w] = (latent[k] - lo) / max(hi - lo, 1e-12)
    return np.repeat(np.clip(grid, 0.0, 1.0)[..., None], 3, axis=-1)
