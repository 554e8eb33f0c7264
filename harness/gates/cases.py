"""Golden cases: golden/<model>/cases.toml read into GoldenCase (data); the store of golden images is golden.py."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import ConfigError
from ..core.schema import Field, check_table, is_int, is_number, positive_int, read_toml
from ..model.config import REPO_ROOT

if TYPE_CHECKING:
    from ..model.bundle import ModelBundle
from ..sampling.reference_run import sample_settings
from ..sampling.settings import SampleSettings
from ..sampling.spectrum import SAMPLERS, check_params, params_from

__all__ = ["GOLDEN_DIR", "FORMAT", "GoldenCase", "golden_dir_for", "load_cases", "find_case", "run_key",
           "case_inputs", "chosen_inputs"]


GOLDEN_DIR = REPO_ROOT / "golden"
# cases.toml `format` (optional: a file without one is read as this one); the next change of the
# file's keys raises it, so a file of the other kind is refused by name.
FORMAT = 2


def golden_dir_for(model_name: str) -> Path:
    """golden/<model name>: where a model's cases.toml and goldens live unless --golden-dir says."""
    return GOLDEN_DIR / model_name


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")   # becomes a file name: no paths, no dots
_NPY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.npy$")  # a file beside cases.toml, never a path
_DEFAULT_KEYS = {"steps", "cfg", "sampler", "shift"}
# A new model's cases.toml may have no thresholds until `harness goldens thresholds` writes them.
_OPTIONAL_DEFAULT_KEYS = {"cosine_min", "ssim_min", "psnr_min"}
THRESHOLDS_COMMAND = "bin/harness goldens thresholds"
_CASE_KEYS = {"name", "prompt", "text_emb", "uncond_text_emb", "seed", "steps", "cfg", "ssim_min", "psnr_min",
              "sampler", "spectrum", "cosine_min"}
# Settings that decide the image; thresholds only decide the verdict and may change freely.
IMAGE_SETTINGS = ("prompt", "text_emb", "uncond_text_emb", "seed", "steps", "cfg", "sampler", "shift", "spectrum")


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
    # its text embeddings from .npy files [text_emb_tokens, text_emb_dim] beside cases.toml.
    text_emb: str | None = None
    uncond_text_emb: str | None = None
    # Latent goldens also gate the cosine of obtained and golden latents (0: not gated).
    cosine_min: float = 0.0
    # sampler "spectrum": its parameters, resolved from the case's `spectrum` table over the preset.
    spectrum: dict | None = field(default=None, hash=False)

    def settings(self) -> dict:
        """The settings that decide the rendered image."""
        return {key: getattr(self, key) for key in IMAGE_SETTINGS}


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


def load_cases(path: str | Path, thresholds: bool = True) -> list[GoldenCase]:
    """Parse and validate the golden cases; every problem names the file, the case and the field.
    thresholds=False reads a case without ssim_min / psnr_min (NaN: no comparison passes it)."""
    path = Path(path)
    data = read_toml(path, "golden cases file")
    if data.get("format", FORMAT) != FORMAT:
        raise ConfigError(f"{path}: format {data['format']!r} is not one this suite reads ({FORMAT})")
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
        fields = dict(check_table(entry, _fields(_CASE_KEYS, {"name", "seed"}), where))
        if ("prompt" in fields) == ("text_emb" in fields):
            raise ConfigError(f"{where}: give either 'prompt' or 'text_emb' (a .npy text embedding), not "
                              f"{'both' if 'prompt' in fields else 'neither'}")
        fields.setdefault("prompt", "")
        if fields["name"] in seen:
            raise ConfigError(f"{where}: duplicate case name '{fields['name']}'")
        seen.add(fields["name"])
        merged = {**defaults, **fields}
        missing = [key for key in ("ssim_min", "psnr_min") if key not in merged]
        if missing and thresholds:
            raise ConfigError(f"{where}: no {' / '.join(missing)} (in the case or [defaults]); derive them from "
                              f"the model's own runs: {THRESHOLDS_COMMAND}")
        merged.update({key: math.nan for key in missing})
        merged["cfg"], merged["shift"] = float(merged["cfg"]), float(merged["shift"])
        merged["ssim_min"], merged["psnr_min"] = float(merged["ssim_min"]), float(merged["psnr_min"])
        merged["cosine_min"] = float(merged.get("cosine_min", 0.0))
        merged["spectrum"] = _spectrum_of(merged, where)
        cases.append(GoldenCase(**merged))
    return cases


def _spectrum_of(case: dict, where: str) -> dict | None:
    """The resolved Spectrum parameters of a spectrum case (checked against its steps), else None."""
    if case["sampler"] != "spectrum":
        if "spectrum" in case:
            raise ConfigError(f"{where}: a 'spectrum' table needs sampler = \"spectrum\" (sampler is "
                              f"{case['sampler']!r})")
        return None
    params = params_from(case.get("spectrum"), where)
    check_params(params, case["steps"], name=lambda f: f"{where}: spectrum.{f}")
    return params.as_dict()


def find_case(golden_dir: Path, name: str) -> GoldenCase:
    """The case `name` of golden_dir/cases.toml; a ConfigError naming the known ones otherwise."""
    cases = load_cases(Path(golden_dir) / "cases.toml")
    for case in cases:
        if case.name == name:
            return case
    raise ConfigError(f"--case {name}: no such golden case in {Path(golden_dir) / 'cases.toml'} "
                      f"(known: {', '.join(c.name for c in cases)})")


# ----------------------------------------------------------------------------- a case as a run

@dataclass(frozen=True)
class CaseInputs:
    """What a partitioned run of a golden case takes: the prompt (a label when the case gives text
    embeddings), the run settings and the text embeddings ({stream: [1, L, C]}; None: encode the prompt)."""
    prompt: str
    settings: SampleSettings
    text_embs: dict | None


def run_key(case: GoldenCase, steps: int | None = None) -> str:
    """Everything that decides a run of `case` (never its name, which a derived run can share):
    two runs with the same key render the same latent."""
    return json.dumps({**case.settings(), "steps": steps or case.steps}, sort_keys=True)


def case_inputs(case: GoldenCase, cfg, golden_dir: Path, steps: int | None = None) -> CaseInputs:
    """The one place a golden case becomes run settings: every caller (the gates, compare-toolkits,
    calibration capture, accuracy) renders a case as its golden was rendered, sampler included."""
    settings = SampleSettings(steps=steps or case.steps, cfg_scale=case.cfg, shift=case.shift, seed=case.seed,
                              sampler=case.sampler, spectrum=case.spectrum)
    if case.text_emb is None:
        return CaseInputs(case.prompt, settings, None)
    text_embs = {"cond": _text_emb_file(case, case.text_emb, cfg, golden_dir)}
    if case.cfg != 1.0:
        if case.uncond_text_emb is None:
            raise ConfigError(f"golden case '{case.name}': CFG {case.cfg} needs 'uncond_text_emb' "
                              "(the encoded empty prompt) beside 'text_emb'")
        text_embs["uncond"] = _text_emb_file(case, case.uncond_text_emb, cfg, golden_dir)
    return CaseInputs(f"<text embedding {case.text_emb}>", settings, text_embs)


def _text_emb_file(case: GoldenCase, name: str, cfg, golden_dir: Path) -> np.ndarray:
    path = Path(golden_dir) / name
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(f"golden case '{case.name}': cannot read text embedding {path}: {exc}") from None
    if array.shape != (cfg.text_emb_tokens, cfg.text_emb_dim) or not np.isfinite(array).all():
        raise ConfigError(f"golden case '{case.name}': {path} is {array.dtype} {list(array.shape)}; "
                          f"{cfg.name} takes finite [{cfg.text_emb_tokens}, {cfg.text_emb_dim}]")
    return array.astype(np.float32)[None]


def chosen_inputs(bundle: ModelBundle, case: str | None, golden_dir, prompt=None, steps=None,
                  cfg_scale=None, seed=None) -> CaseInputs:
    """A command's run: the golden case --case names (its settings, its text embeddings: the way to
    run a model without a prompt encoder here, as Anima is), else --prompt with the model's defaults."""
    golden_dir = golden_dir or golden_dir_for(bundle.cfg.name)
    if case is not None:
        given = [o for o, v in (("--prompt", prompt), ("--cfg", cfg_scale), ("--seed", seed)) if v is not None]
        if given:
            raise ConfigError(f"--case {case} decides the prompt, CFG and seed: drop {', '.join(given)}")
        return case_inputs(find_case(golden_dir, case), bundle.cfg, golden_dir, steps)
    if bundle.encoder is None:
        raise ConfigError(f"model {bundle.cfg.name} has no prompt encoder here ({bundle.model_dir}): "
                          f"give --case NAME, a golden case of {golden_dir / 'cases.toml'} with its "
                          f"text-embedding files")
    prompt = prompt if prompt is not None else bundle.cfg.prompt.get("default", "")
    return CaseInputs(prompt, sample_settings(bundle, steps, cfg_scale, None, seed), None)
