"""What each subgraph is built with: FP16, or INT8 from a calibration set (toolkit/precisions.toml).

A calibration directory holds, per INT8 subgraph, the dataset list file the toolkit reads: one line per
sample, the sample's .npy paths in input order separated by spaces (docs/architecture.md section 8). The
list for subgraph file `NN_blockBB_ffn.onnx` is `NN_blockBB_ffn.txt`; relative paths inside it are
taken from the calibration directory.
"""
from __future__ import annotations

import functools
import tomllib
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError

__all__ = ["PRECISION_FILE_FORMAT", "ALGORITHMS", "METHODS", "LINEARS", "precisions", "recipe",
           "quantization_for", "absolute_dataset", "write_dataset"]

PRECISIONS_FILE = Path(__file__).resolve().parents[2] / "toolkit" / "precisions.toml"


@functools.lru_cache(maxsize=1)
def _recipes() -> dict:
    with open(PRECISIONS_FILE, "rb") as fh:
        return tomllib.load(fh)


def precisions() -> tuple[str, ...]:
    return tuple(_recipes())


# A precision file (`harness search-precision` writes one per candidate; `convert --precision FILE`
# rebuilds from it): which subgraphs go INT8, which of an FFN's linears stay float16, and the
# toolkit's quantization options.
#     format = "anima-precision/1"
#     int8_subgraphs = [2, 5, ...]                  subgraph indices built INT8 (FFNs)
#     float_linears = { "5" = ["layer1"] }          per subgraph: linears kept float16
#     quantized_algorithm = "normal"                 the toolkit's: normal, kl_divergence, mmse
#     quantized_method = "channel"                   channel (per-channel) or layer (per-layer)
#     quantized_dtype = "w8a8", hybrid_float = ["gelu", "output"]
#     calibration = "DIR"                            the set used when --calibration is not given
PRECISION_FILE_FORMAT = "anima-precision/1"
_FILE_KEYS = {"format", "name", "int8_subgraphs", "float_linears", "quantized_dtype", "quantized_algorithm",
              "quantized_method", "hybrid_float", "calibration", "cosine_min", "note"}
ALGORITHMS = ("normal", "kl_divergence", "mmse")
METHODS = ("channel", "layer")
LINEARS = ("layer1", "layer2")


def is_precision_file(precision: str) -> bool:
    return str(precision).endswith(".toml")


@functools.cache
def _precision_file(path: str, mtime_ns: int) -> dict:
    where = f"--precision {path}"
    try:
        with open(path, "rb") as fh:
            spec = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: not valid TOML ({exc})") from None
    if spec.get("format") != PRECISION_FILE_FORMAT:
        raise ConfigError(f"{where}: not a precision file (format = \"{PRECISION_FILE_FORMAT}\")")
    unknown = sorted(set(spec) - _FILE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'")
    subs = spec.get("int8_subgraphs", [])
    if not isinstance(subs, list) or not all(isinstance(i, int) and i >= 0 for i in subs):
        raise ConfigError(f"{where}: int8_subgraphs must be a list of subgraph numbers")
    for key, allowed in (("quantized_algorithm", ALGORITHMS), ("quantized_method", METHODS)):
        if key in spec and spec[key] not in allowed:
            raise ConfigError(f"{where}: {key} '{spec[key]}' (choose {', '.join(allowed)})")
    for index, linears in spec.get("float_linears", {}).items():
        if not str(index).isdigit() or int(index) not in subs or not set(linears) < set(LINEARS):
            raise ConfigError(f"{where}: float_linears '{index}' = {linears}: name an INT8 subgraph "
                              f"and one of {', '.join(LINEARS)}")
    return spec


def recipe(precision: str) -> dict:
    """A named recipe of toolkit/precisions.toml, or a precision file (ending in .toml)."""
    if is_precision_file(precision):
        path = Path(precision)
        if not path.is_file():
            raise ConfigError(f"--precision {precision}: no such precision file")
        return _precision_file(str(path.resolve()), path.stat().st_mtime_ns)
    if precision not in _recipes():
        raise ConfigError(f"--precision '{precision}' is unknown (choose {' or '.join(precisions())}, "
                          f"or a precision file *.toml)")
    return _recipes()[precision]


def _is_int8(entry, spec: dict) -> bool:
    if "int8_subgraphs" in spec:
        return entry.index in spec["int8_subgraphs"]
    return entry.branch in spec.get("int8_branches", [])


def dataset_file(calibration, entry) -> Path:
    return Path(calibration) / f"{Path(entry.file).stem}.txt"


def check_dataset(path: Path, entry) -> Path:
    """The list exists, every line has one readable .npy per input, of the input's shape."""
    if not path.is_file():
        raise ConfigError(f"calibration set for {entry.label} is missing: no {path}")
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    if not lines:
        raise ConfigError(f"calibration set {path} ({entry.label}) lists no samples")
    for number, paths in enumerate(lines, 1):
        if len(paths) != len(entry.inputs):
            raise ConfigError(f"{path} line {number}: {len(paths)} files for {len(entry.inputs)} "
                              f"inputs of {entry.label}")
        for name, spec in zip(paths, entry.inputs):
            npy = _resolve(path.parent, name)
            if not npy.is_file():
                raise ConfigError(f"{path} line {number}: {npy} is missing")
            shape = np.load(npy, mmap_mode="r").shape
            if tuple(shape) != spec.shape:
                raise ConfigError(f"{path} line {number}: {npy.name} is {list(shape)}, input "
                                  f"'{spec.name}' of {entry.label} is {list(spec.shape)}")
    return path


def _resolve(base: Path, name: str) -> Path:
    p = Path(name)
    return p if p.is_absolute() else base / p


def quantization_for(entry, precision: str, calibration) -> dict | None:
    """None for an FP16 subgraph; the toolkit's quantization settings for an INT8 one.

    The toolkit resolves dataset paths from its working directory, so the list handed to it is an
    absolute-path copy (written by the caller into its work directory; see absolute_dataset)."""
    spec = recipe(precision)
    if not _is_int8(entry, spec):
        return None
    if calibration is None and spec.get("calibration"):
        calibration = spec["calibration"]
    if calibration is None:
        raise ConfigError(f"--precision {precision} builds {entry.branch} in INT8: it needs "
                          f"--calibration DIR (the captured calibration set)")
    if not Path(calibration).is_dir():
        raise ConfigError(f"--calibration {calibration}: calibration set directory is missing")
    dataset = check_dataset(dataset_file(calibration, entry), entry)
    return {"dataset": str(dataset.resolve()),
            "quantized_dtype": spec.get("quantized_dtype", "w8a8"),
            "quantized_algorithm": spec.get("quantized_algorithm", "normal"),
            "quantized_method": spec.get("quantized_method", "channel"),
            "custom_hybrid": [list(p) for p in spec.get("custom_hybrid", [])],
            "hybrid_float": list(spec.get("hybrid_float", []))
                            + list(spec.get("float_linears", {}).get(str(entry.index), []))}


def absolute_dataset(dataset: Path, out: Path) -> Path:
    """A copy of a dataset list with absolute .npy paths (the toolkit reads them from its cwd)."""
    lines = [" ".join(str(_resolve(dataset.parent, n).resolve()) for n in ln.split())
             for ln in dataset.read_text().splitlines() if ln.strip()]
    out.write_text("\n".join(lines) + "\n")
    return out


def write_dataset(directory, entry, samples: list[list[np.ndarray]]) -> Path:
    """Write samples as .npy files plus the entry's dataset list (relative paths) into directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = Path(entry.file).stem
    lines = []
    for k, arrays in enumerate(samples):
        names = []
        for spec, array in zip(entry.inputs, arrays):
            name = f"{stem}.{k:03d}.{spec.name}.npy"
            np.save(directory / name, np.asarray(array, dtype=spec.dtype))
            names.append(name)
        lines.append(" ".join(names))
    path = dataset_file(directory, entry)
    path.write_text("\n".join(lines) + "\n")
    return path
