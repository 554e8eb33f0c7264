"""Image quality against a golden image: SSIM, PSNR, max abs diff (scikit-image), and the diff figure.

Images are float32 RGB in [0, 1], shape [H, W, 3]. `data_range` is always given explicitly: left to
scikit-image it is guessed from the dtype (float -> 2.0 for [-1, 1]), which would silently loosen the
gate. Identical images have PSNR = inf; `QualityResult.to_json()` writes it as the string "inf" so the
JSON report stays strict JSON (json.dumps would otherwise emit the non-standard token `Infinity`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_path
from ..core.errors import HarnessError

__all__ = ["QualityResult", "ImageMismatch", "compare", "compare_latents", "diff_map", "diff_figure"]

DATA_RANGE = 1.0
# skimage's default SSIM window is 7x7; a smaller image cannot be compared with it.
_MIN_SIDE = 7


class ImageMismatch(HarnessError):
    """The obtained and golden images cannot be compared (shape, channels, NaN/Inf)."""


@dataclass(frozen=True)
class QualityResult:
    ssim: float
    psnr: float          # dB; float('inf') for identical images
    max_abs_diff: float
    kind: str = "image"  # or "latent": the gate ran on final latents (no decoder)
    cosine: float | None = None     # latents only
    data_range: float = DATA_RANGE

    def passes(self, ssim_min: float, psnr_min: float, cosine_min: float = 0.0) -> bool:
        cosine_ok = self.cosine is None or self.cosine >= cosine_min
        return self.ssim >= ssim_min and self.psnr >= psnr_min and cosine_ok

    def margins(self, ssim_min: float, psnr_min: float, cosine_min: float = 0.0) -> dict:
        """Measured minus threshold per metric (negative: that metric fails)."""
        out = {"ssim": self.ssim - ssim_min, "psnr_db": self.psnr - psnr_min}
        if self.cosine is not None:
            out["cosine"] = self.cosine - cosine_min
        return out

    def summary(self) -> str:
        psnr = "inf" if math.isinf(self.psnr) else f"{self.psnr:.2f}"
        text = f"{self.kind}: SSIM {self.ssim:.6f}  PSNR {psnr} dB"
        if self.cosine is not None:
            text += f"  cosine {self.cosine:.7f}"
        return text + f"  max|diff| {self.max_abs_diff:.3g}"

    def to_json(self) -> dict:
        out = {"kind": self.kind, "ssim": self.ssim, "psnr_db": _json_float(self.psnr),
               "max_abs_diff": self.max_abs_diff, "data_range": self.data_range}
        if self.cosine is not None:
            out["cosine"] = self.cosine
        return out

    @classmethod
    def from_json(cls, data: dict) -> QualityResult:
        return cls(float(data["ssim"]), float(data["psnr_db"]), float(data["max_abs_diff"]),
                   data.get("kind", "image"), data.get("cosine"), float(data.get("data_range", DATA_RANGE)))


def _json_float(value: float):
    # float("inf") round-trips from the string "inf", so readers need no special case.
    return value if math.isfinite(value) else str(value)


def _check_image(image, role: str) -> np.ndarray:
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[-1] != 3:
        raise ImageMismatch(f"{role} image has shape {array.shape}; expected [H, W, 3] RGB")
    if min(array.shape[:2]) < _MIN_SIDE:
        raise ImageMismatch(f"{role} image {array.shape} is smaller than the {_MIN_SIDE}x{_MIN_SIDE} "
                            "SSIM window")
    if not np.issubdtype(array.dtype, np.floating):
        raise ImageMismatch(f"{role} image is {array.dtype}; expected float in [0, 1]")
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise ImageMismatch(f"{role} image has {bad} NaN/Inf values")
    return array.astype(np.float64, copy=False)


def _check_pair(obtained, golden) -> tuple[np.ndarray, np.ndarray]:
    o = _check_image(obtained, "obtained")
    g = _check_image(golden, "golden")
    if o.shape != g.shape:
        raise ImageMismatch(f"obtained image shape {o.shape} differs from golden shape {g.shape}: "
                            "the golden was made for another model or decoder")
    return o, g


def compare(obtained, golden) -> QualityResult:
    """SSIM (mean over the image, channels averaged), PSNR in dB and max abs diff, data range 1.0."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    o, g = _check_pair(obtained, golden)
    ssim = float(structural_similarity(o, g, data_range=DATA_RANGE, channel_axis=-1))
    if np.array_equal(o, g):
        psnr = float("inf")   # skimage divides by MSE 0 here and warns; the answer is known
    else:
        psnr = float(peak_signal_noise_ratio(g, o, data_range=DATA_RANGE))
    return QualityResult(ssim=ssim, psnr=psnr, max_abs_diff=float(np.max(np.abs(o - g))))


def _check_latent(latent, role: str) -> np.ndarray:
    array = np.asarray(latent)
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 3 or min(array.shape[1:]) < _MIN_SIDE or not np.issubdtype(array.dtype, np.floating):
        raise ImageMismatch(f"{role} latent is {array.dtype} {list(array.shape)}; expected float [C, H, W] "
                            f"with H, W >= {_MIN_SIDE}")
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise ImageMismatch(f"{role} latent has {bad} NaN/Inf values")
    return array.astype(np.float64, copy=False)


def compare_latents(obtained, golden) -> QualityResult:
    """Final latents [C, H, W] (or [1, C, H, W]) compared as C-channel images: SSIM over the channels
    and PSNR with the data range taken from the golden (max - min: latents have no fixed range),
    plus the cosine of the two flattened latents."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    o, g = _check_latent(obtained, "obtained"), _check_latent(golden, "golden")
    if o.shape != g.shape:
        raise ImageMismatch(f"obtained latent shape {list(o.shape)} differs from golden {list(g.shape)}: "
                            "the golden was made for another model")
    data_range = float(g.max() - g.min()) or 1.0
    oc, gc = np.moveaxis(o, 0, -1), np.moveaxis(g, 0, -1)
    ssim = float(structural_similarity(oc, gc, data_range=data_range, channel_axis=-1))
    psnr = float("inf") if np.array_equal(o, g) else float(peak_signal_noise_ratio(gc, oc, data_range=data_range))
    cosine = float(np.dot(o.ravel(), g.ravel()) / max(np.linalg.norm(o) * np.linalg.norm(g), 1e-30))
    return QualityResult(ssim=ssim, psnr=psnr, max_abs_diff=float(np.max(np.abs(o - g))), kind="latent",
                         cosine=cosine, data_range=data_range)


def diff_map(obtained, golden) -> np.ndarray:
    """|obtained - golden| summed over the channels: [H, W], 0..3."""
    o, g = _check_pair(obtained, golden)
    return np.abs(o - g).sum(axis=-1)


def diff_figure(obtained, golden, path: str | Path, title: str,
                result: QualityResult | None = None) -> Path:
    """Write obtained | golden | diff heat map side by side as a PNG; the artifact of a failed gate."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    result = result if result is not None else compare(obtained, golden)
    diff = diff_map(obtained, golden)
    path = Path(path)
    # A bare Figure with the Agg canvas: no pyplot global state, no GUI backend on a headless board.
    fig = Figure(figsize=(11, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax_o, ax_g, ax_d = fig.subplots(1, 3)
    for ax, image, label in ((ax_o, obtained, "obtained"), (ax_g, golden, "golden")):
        ax.imshow(np.clip(np.asarray(image, dtype=np.float64), 0.0, 1.0), interpolation="nearest")
        ax.set_title(label)
        ax.set_axis_off()
    # The colour scale follows the largest difference so FP16-level diffs are visible, not black.
    vmax = max(float(diff.max()), 1e-12)
    heat = ax_d.imshow(diff, cmap="magma", vmin=0.0, vmax=vmax, interpolation="nearest")
    ax_d.set_title("|obtained - golden|, summed over RGB")
    ax_d.set_axis_off()
    fig.colorbar(heat, ax=ax_d, shrink=0.85)
    fig.suptitle(f"{title}\n{result.summary()}")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return path
