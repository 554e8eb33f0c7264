"""Converted partitions made on first use and kept, like the exported ones (the rknn-sim gates need one).

Under the suite's cache directory, named by the weights digest, toolkit version and precision:
    partitions/<model>-float32-<digest>                       the FP32 export (the toolkit's source)
    calibration/<model>-<digest>-ffn-high-low                 the board's calibration recipe (w8a8-ffn)
    partitions/<model>-float32-<digest>-rknn-<version>-<precision>   `harness convert` output
    (+ -remedies-<hash> when the export has a conversion.toml: `harness reduce`'s remedies built in)
Each is written whole or not at all (export, capture and convert all stage and rename), so an
interrupted first use is redone, never trusted.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import ConfigError
from .partitions import exported_partition, is_current

__all__ = ["cached_conversion", "cached_fp32_export"]


def cached_fp32_export(bundle, cache_dir: Path, granularity: str = "branch") -> Path:
    return exported_partition(bundle, "float32", root=Path(cache_dir) / "partitions", granularity=granularity)


def cached_calibration(bundle, cache_dir: Path, source: Path) -> Path:
    """The board's recipe ({high, low} sigma x {cond, uncond}, FFNs) from the model's default prompt."""
    from ..sampling.reference_run import sample_settings
    from .capture import RECORD_FILE, CaptureRecipe, capture_calibration
    out = Path(cache_dir) / "calibration" / f"{bundle.cfg.name}-{bundle.digest[:12]}-ffn-high-low"
    if not (out / RECORD_FILE).is_file():
        settings = sample_settings(bundle)
        print(f"[rknn-sim] capturing calibration into {out} (first use)", file=sys.stderr, flush=True)
        capture_calibration(bundle, source, out, bundle.cfg.prompt.get("default", ""), settings,
                            CaptureRecipe(["ffn"], [0, settings.steps - 1], ["cond", "uncond"]))
    return out


def cached_conversion(bundle, cache_dir: Path, precision: str, calibration: Path | None = None,
                      version: str | None = None, granularity: str = "branch") -> Path:
    """A converted partition of these weights for the rknn-sim backend, converted on first use."""
    from ..toolkit.convert import ConvertSettings, convert_partition
    from ..toolkit.envs import default_version, toolkit_python
    from ..toolkit.precisions import precisions
    from ..toolkit.remedies import REMEDY_FILE
    if precision not in precisions():
        raise ConfigError(f"--precision {precision}: the toolkit builds {' or '.join(precisions())}")
    version = version or default_version()
    toolkit_python(version)              # absent environment: one line naming bin/toolkit-env
    source = cached_fp32_export(bundle, cache_dir, granularity)
    if precision != "float16" and calibration is None:
        calibration = cached_calibration(bundle, cache_dir, source)
    name = f"{source.name}-rknn-{version}-{precision}"
    if calibration is not None:     # another calibration set is another conversion
        import hashlib

        from ..partition.manifest import load_manifest
        from .capture import load_calibration
        load_calibration(calibration, load_manifest(source))
        name += "-cal-" + hashlib.sha256((Path(calibration) / "calibration.json").read_bytes()).hexdigest()[:10]
    remedies = Path(source) / REMEDY_FILE
    if remedies.is_file():          # harness reduce's remedies are built in: another file, another conversion
        import hashlib
        name += "-remedies-" + hashlib.sha256(remedies.read_bytes()).hexdigest()[:10]
    out = source.with_name(name)
    if not is_current(out):
        print(f"[rknn-sim] converting {source.name} with rknn-toolkit2 {version} ({precision}) into "
              f"{out} (first use)", file=sys.stderr, flush=True)
        convert_partition(source, out,
                          ConvertSettings(version=version, precision=precision, calibration=calibration, quiet=True))
    return out
