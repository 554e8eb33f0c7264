"""A partition's own conversion settings: `conversion.toml` in the FP32 export, one table per subgraph
file stem, written by `harness reduce` when a remedy restored that subgraph's gate and read by
`harness convert` of the same toolkit version, which builds the subgraph with it and records it in
the manifest's conversion table (and the rknn-sim backend rebuilds with it from there):

    [subgraphs.14_block04_ffn]
    op_target = { layer1_mm = "cpu" }        # rknn.config op_target (the toolkit's tensor names)
    # or the subgraph quantised, calibrated on the inputs it failed on (saved beside this file):
    quantization = { quantized_dtype = "w16a16i", quantized_algorithm = "normal",
                     quantized_method = "channel", dataset = "remedies/14_block04_ffn/14_block04_ffn.txt" }
    # or nodes 0-6 run by the host in FP32, the rest on the NPU (toolkit/split.py):
    split = { start = 0, end = 7, first = "layer1", last = "y" }
    toolkit = "2.3.2"
    found_by = "harness reduce: MatMul layer1"
    # found on an INT8 build (reduce --int8): applied when the precision builds the subgraph INT8,
    # its float16 islands added to the recipe's quantization (hybrid quantization's custom_hybrid)
    build = "int8"
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from ..core.atomic import atomic_write_text
from ..core.errors import ConfigError

__all__ = ["REMEDY_FILE", "read_remedies", "write_remedy", "APPLIED_KEYS"]

REMEDY_FILE = "conversion.toml"
APPLIED_KEYS = ("op_target", "quantization", "split")


def read_remedies(partition: Path) -> dict[str, dict]:
    """{file stem: settings} of the partition's conversion.toml ({} without one)."""
    path = Path(partition) / REMEDY_FILE
    if not path.is_file():
        return {}
    try:
        table = tomllib.loads(path.read_text()).get("subgraphs", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for stem, settings in table.items():
        unknown = sorted(set(settings) - {*APPLIED_KEYS, "toolkit", "found_by", "build"})
        if unknown or not all(isinstance(settings.get(k, {}), dict) for k in APPLIED_KEYS):
            raise ConfigError(f"{path}: [subgraphs.{stem}]: unknown or malformed setting(s) "
                              f"{', '.join(unknown) or 'op_target'} (known: {', '.join(APPLIED_KEYS)})")
    return table


def remedy_quantization(partition: Path, settings: dict) -> dict | None:
    """A remedy's quantization as convert records it (the dataset list as an absolute path)."""
    quant = settings.get("quantization")
    if not quant:
        return None
    dataset = Path(partition) / quant["dataset"]
    if not dataset.is_file():
        raise ConfigError(f"{Path(partition) / REMEDY_FILE}: the remedy's calibration list {dataset} is missing")
    return {"custom_hybrid": [], "hybrid_float": [], **quant, "dataset": str(dataset.resolve())}


def for_build(remedy: dict, recorded: dict | None) -> bool:
    """Whether a remedy applies to this build of its subgraph: one found on an INT8 build
    (`build = "int8"`, reduce --int8) when the precision builds the subgraph INT8, any other when it
    builds it float16."""
    return (remedy.get("build") == "int8") == (recorded is not None)


def with_islands(recorded: dict, remedy: dict) -> dict:
    """An INT8 build's quantization with an INT8 remedy's float16 islands (custom_hybrid) added."""
    islands = (remedy.get("quantization") or {}).get("custom_hybrid", [])
    return {**recorded, "custom_hybrid": [*recorded.get("custom_hybrid", []), *islands]}


def write_remedy(partition: Path, entry, settings: dict, version: str, found_by: str,
                 samples=None) -> Path:
    """Set one subgraph's remedy in the partition's conversion.toml (the others are kept); a
    quantization's calibration samples go beside it, under remedies/<stem>/."""
    import tomli_w

    from .precisions import write_dataset
    stem = Path(entry.file).stem
    table = read_remedies(partition)
    if "quantization" in settings:
        listing = write_dataset(Path(partition) / "remedies" / stem, entry, samples)
        settings = {**settings, "quantization": {**settings["quantization"],
                                                 "dataset": str(listing.relative_to(partition))}}
    table[stem] = {**{k: settings[k] for k in APPLIED_KEYS if k in settings}, "toolkit": version,
                   "found_by": found_by, **({"build": settings["build"]} if "build" in settings else {})}
    path = Path(partition) / REMEDY_FILE
    atomic_write_text(path, "# written by harness reduce; read by harness convert (docs/toolkit.md)\n"
                      + tomli_w.dumps({"subgraphs": table}))
    return path
