"""Golden cases: golden/<model>/cases.toml read into GoldenCase (data); the store of golden images is golden.py."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..model.config import REPO_ROOT
from ..core.errors import ConfigError
from ..core.schema import Field, check_table, is_int, is_number, positive_int, read_toml
from ..sampling.spectrum import SAMPLERS, check_params, params_from

__all__ = ["GOLDEN_DIR", "FORMAT", "FORMATS", "OLD_KEYS", "GoldenCase", "golden_dir_for", "load_cases"]


GOLDEN_DIR = REPO_ROOT / "golden"
# cases.toml `format`: 2 names a case's text embedding `text_emb`; 1 (no `format` key) said `context`.
FORMAT = 2
FORMATS = (1, 2)
OLD_KEYS = {"context": "text_emb", "uncond_context": "uncond_text_emb"}


def golden_dir_for(model_name: str) -> Path:
    """golden/<model name>: where a model's cases.toml and goldens live unless --golden-dir says."""
    return GOLDEN_DIR / model_name


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")   # becomes a file name: no paths, no dots
_NPY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.npy$")  # a file beside cases.toml, never a path
_DEFAULT_KEYS = {"ssim_min", "psnr_min", "steps", "cfg", "sampler", "shift"}
_OPTIONAL_DEFAULT_KEYS = {"cosine_min"}
_CASE_KEYS = {"name", "prompt", "text_emb", "uncond_text_emb", "seed", "steps", "cfg", "ssim_min", "psnr_min",
              "sampler", "spectrum", "cosine_min"}
# Settings that decide the image; thresholds only decide the verdict and may change freely.
_IMAGE_SETTINGS = ("prompt", "text_emb", "uncond_text_emb", "seed", "steps", "cfg", "sampler", "shift", "spectrum")


@dataclass(frozen=True)
class GoldenCase:
    name: str
    prompt: str
    seed: int
    steps: int
    cfg: float
    sampler: str
    shift: float
    ssim_min: float
    psnr_min: float
    # Instead of a prompt, a model without a prompt encoder here (Anima: Qwen3 + adapter) takes
    # its text embeddings from .npy files [context_tokens, context_dim] beside cases.toml.
    text_emb: str | None = None
    uncond_text_emb: str | None = None
    # Latent goldens also gate the cosine of obtained and golden latents (0: not gated).
    cosine_min: float = 0.0
    # sampler "spectrum": its parameters, resolved from the case's `spectrum` table over the preset.
    spectrum: dict | None = field(default=None, hash=False)

    def settings(self) -> dict:
        """The settings that decide the rendered image."""
        return {key: getattr(self, key) for key in _IMAGE_SETTINGS}


def _fields(keys: set[str], required: set[str]) -> dict[str, Field]:
    return {k: Field(*_CHECKS[k], required=k in required) for k in sorted(keys)}


_CHECKS = {
    "name": (lambda v: isinstance(v, str) and bool(_NAME.match(v)),
             "a file-safe name (letters, digits, '_', '-')"),
    "prompt": (lambda v: isinstance(v, str), "a string"),
    "text_emb": (lambda v: isinstance(v, str) and bool(_NPY.match(v)), "a .npy file name beside cases.toml"),
    "uncond_text_emb": (lambda v: isinstance(v, str) and bool(_NPY.match(v)), "a .npy file name beside cases.toml"),
    "seed": (lambda v: is_int(v) and 0 <= v < 2 ** 63, "a whole number in 0..2^63-1"),
    "steps": (positive_int, "a positive whole number"),
    "cfg": (lambda v: is_number(v) and 0.0 <= v <= 30.0, "a number in 0..30"),
    "sampler": (lambda v: v in SAMPLERS, f"one of {list(SAMPLERS)}"),
    "shift": (lambda v: is_number(v) and v > 0, "a positive number"),
    "spectrum": (lambda v: isinstance(v, dict), "a table of Spectrum parameters (preset, warmup, window, ...)"),
    "ssim_min": (lambda v: is_number(v) and 0.0 < v <= 1.0, "a number in (0, 1]"),
    "psnr_min": (lambda v: is_number(v) and v > 0, "a positive number of dB"),
    "cosine_min": (lambda v: is_number(v) and -1.0 <= v <= 1.0, "a number in -1..1"),
}


def load_cases(path: str | Path) -> list[GoldenCase]:
    """Parse and validate the golden cases; every problem names the file, the case and the field."""
    path = Path(path)
    data = read_toml(path, "golden cases file")
    version = data.get("format", 1)
    if version not in FORMATS:
        raise ConfigError(f"{path}: format {version!r} is not one this suite reads ({', '.join(map(str, FORMATS))})")
    unknown = sorted(set(data) - {"format", "defaults", "case"})
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {unknown}; expected format, [defaults] and [[case]]")
    defaults = check_table(data.get("defaults", {}),
                           _fields(_DEFAULT_KEYS | _OPTIONAL_DEFAULT_KEYS, _DEFAULT_KEYS), f"{path} [defaults]")
    entries = data.get("case", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: no [[case]] entries")
    cases, seen = [], set()
    for index, entry in enumerate(entries, start=1):
        label = entry.get("name", "?") if isinstance(entry, dict) else "?"
        where = f"{path} [[case]] #{index} '{label}'"
        entry = _current(entry, version)
        fields = dict(check_table(entry, _fields(_CASE_KEYS, {"name", "seed"}), where))
        if ("prompt" in fields) == ("text_emb" in fields):
            raise ConfigError(f"{where}: give either 'prompt' or 'text_emb' (a .npy text embedding), not "
                              f"{'both' if 'prompt' in fields else 'neither'}")
        fields.setdefault("prompt", "")
        if fields["name"] in seen:
            raise ConfigError(f"{where}: duplicate case name '{fields['name']}'")
        seen.add(fields["name"])
        merged = {**defaults, **fields}
        merged["cfg"], merged["shift"] = float(merged["cfg"]), float(merged["shift"])
        merged["ssim_min"], merged["psnr_min"] = float(merged["ssim_min"]), float(merged["psnr_min"])
        merged["cosine_min"] = float(merged.get("cosine_min", 0.0))
        merged["spectrum"] = _spectrum_of(merged, where)
        cases.append(GoldenCase(**merged))
    return cases


def _current(entry, version: int):
    """A case of an older format in today's words (format 1 said `context` for the text embedding)."""
    if version == 1 and isinstance(entry, dict):
        return {OLD_KEYS.get(key, key): value for key, value in entry.items()}
    return entry


def _spectrum_of(case: dict, where: str) -> dict | None:
    """The resolved Spectrum parameters of a spectrum case (checked against its steps), else None."""
    if case["sampler"] != "spectrum":
        if "spectrum" in case:
            raise ConfigError(f"{where}: a 'spectrum' table needs sampler = \"spectrum\" (sampler is {case['sampler']!r})")
        return None
    params = params_from(case.get("spectrum"), where)
    check_params(params, case["steps"], name=lambda f: f"{where}: spectrum.{f}")
    return params.as_dict()
