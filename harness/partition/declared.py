"""What each subgraph file says it is, read from the file itself, against its manifest entry.

A checksum proves a file is the one the manifest was written for, not that the manifest describes
it: give an ONNX subgraph an extra output and re-sign it (sha256 and bytes updated) and every
checksum passes. So inspect opens each file and checks what it declares:

- an ONNX subgraph: its graph inputs and outputs (names, element types, shapes) and the identity
  the exporter writes into its metadata (index, block, branch);
- a .rknn file: the model description rknn-toolkit2 appends to it (a JSON table after a
  little-endian uint64 length, the last bytes of the file): the toolkit version that built it, the
  target platform, and its input and output names. A partition whose manifest claims another
  toolkit version than its files carry fails here, naming both, instead of sending the simulator
  to look for the environment of the version the manifest claims.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..core.errors import ManifestError

__all__ = ["check_identity", "check_declared", "rknn_version"]

_LENGTH_BYTES = 8

_LABEL = re.compile(r"^subgraph (?P<index>\d+) \((?:block (?P<block>\d+) )?(?P<branch>\w+)\)$")


def check_identity(label: str, path, metadata: dict) -> None:
    """The exporter writes index, block and branch into each ONNX file's metadata: refuse a file
    that is another subgraph than the manifest entry that names it (two files swapped in a manifest
    whose checksums were swapped too still run, with the same shapes, and give a wrong image)."""
    match = _LABEL.match(label)
    if match is None:
        return
    want = {k: v for k, v in match.groupdict().items() if v is not None}
    have = {k: metadata[k] for k in want if k in metadata}
    if have != {k: want[k] for k in have}:
        found = ", ".join(f"{k} {v}" for k, v in sorted(have.items()))
        raise ManifestError(f"{label}: file {path} is another subgraph per its ONNX metadata ({found})")


def check_declared(manifest, entry) -> None:
    """ManifestError naming the entry and the disagreement when its file declares something else."""
    path = manifest.path_of(entry)
    if path.name.endswith(".split.json"):     # a split subgraph's plan (harness/toolkit/split.py)
        _check_plan(path, entry, where=f"{manifest.file}: {entry.label}")
    elif path.suffix == ".rknn":
        check_rknn(path, entry, manifest.conversion or {}, where=f"{manifest.file}: {entry.label}")
    else:
        check_onnx(path, entry, where=f"{manifest.file}: {entry.label}")


def _check_plan(path: Path, entry, where: str) -> None:
    """A split plan declares the entry's inputs and outputs (its parts are checked when loaded)."""
    try:
        plan = json.loads(path.read_text())
        declared = (plan["inputs"], plan["outputs"])
    except (OSError, ValueError, KeyError) as exc:
        raise ManifestError(f"{where}: split plan {path} is not readable: {exc}") from None
    want = ([s.name for s in entry.inputs], [s.name for s in entry.outputs])
    if tuple(declared) != want:
        raise ManifestError(f"{where}: split plan {path} reads {declared[0]} and writes {declared[1]}, "
                            f"the manifest says {want[0]} and {want[1]}")


# ---------------------------------------------------------------- ONNX

def _onnx_tensors(values) -> list[tuple[str, str, tuple]]:
    from onnx.helper import tensor_dtype_to_np_dtype
    out = []
    for value in values:
        t = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)
        dtype = str(tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else "untyped"
        out.append((value.name, dtype, shape))
    return out


def _specs(specs) -> list[tuple[str, str, tuple]]:
    return [(s.name, s.dtype, tuple(s.shape)) for s in specs]


def check_onnx(path: Path, entry, where: str) -> None:
    import onnx
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:       # any error: onnx raises protobuf's DecodeError and others
        raise ManifestError(f"{where}: {path.name} is not a readable ONNX model ({type(exc).__name__})") from None
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    for what, declared, listed in (
            ("inputs", _onnx_tensors(v for v in graph.input if v.name not in initializers), _specs(entry.inputs)),
            ("outputs", _onnx_tensors(graph.output), _specs(entry.outputs))):
        if declared != listed:
            raise ManifestError(f"{where}: {path.name} declares {what} {_describe(declared)}, "
                                f"the manifest lists {_describe(listed)}")
    check_identity(entry.label, path, {p.key: p.value for p in model.metadata_props})


def _describe(tensors) -> str:
    return "[" + ", ".join(f"{n} {d} {list(s)}" for n, d, s in tensors) + "]"


# ---------------------------------------------------------------- .rknn

# How much of a file's end to read for its description, growing: a subgraph file is up to hundreds of MB
# (the stack preflight reads all 84 on the board), its description a few KB to a few MB.
_TAIL_WINDOWS = (1 << 20, 1 << 24, None)


def _tail(path: Path, size: int | None) -> tuple[bytes, bool]:
    """The last `size` bytes of the file (all of it for None) and whether that is the whole file."""
    with open(path, "rb") as fh:
        total = fh.seek(0, 2)
        fh.seek(0 if size is None else max(0, total - size))
        data = fh.read()
    return data, len(data) == total


def rknn_description(path: Path) -> dict:
    """The model description table at the end of a .rknn file; ManifestError when there is none."""
    for window in _TAIL_WINDOWS:
        data, whole = _tail(Path(path), window)
        start = len(data)
        # The table is last and its length sits just before it: try each '{"' from the end.
        while (start := data.rfind(b'{"', 0, start)) >= _LENGTH_BYTES:
            if int.from_bytes(data[start - _LENGTH_BYTES:start], "little") == len(data) - start:
                try:
                    return json.loads(data[start:])
                except (ValueError, UnicodeDecodeError):
                    whole = True
                    break
        if whole:
            break
    raise ManifestError(f"{path}: no rknn-toolkit2 model description at the end of the file "
                        f"(not a .rknn file, or cut short)")


def rknn_version(path: Path) -> str:
    """The rknn-toolkit2 version that built a .rknn file, as the file says."""
    version = rknn_description(path).get("version")
    if not isinstance(version, str) or not version.strip():
        # an empty version says no more than a missing one: both are refused
        raise ManifestError(f"{path}: its model description names no toolkit version"
                            + (" (an empty version string)" if isinstance(version, str) else ""))
    return version


def _rknn_names(description: dict, side: str) -> list[str | None]:
    tensors = {t.get("tensor_id"): t.get("url") for t in description.get("norm_tensor", [])}
    links = sorted((g for g in description.get("graph", []) if g.get("left") == side),
                   key=lambda g: g.get("left_tensor_id", 0))
    return [tensors.get(g.get("right_tensor_id")) for g in links]


def check_rknn(path: Path, entry, conversion: dict, where: str) -> None:
    try:
        description = rknn_description(path)
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    claimed = conversion.get("toolkit_version")
    if claimed is not None and description.get("version") != claimed:
        raise ManifestError(f"{where}: {path.name} was built by rknn-toolkit2 {description.get('version')}, "
                            f"the manifest's conversion says {claimed}")
    targets = description.get("target_platform") or []
    if conversion.get("target") and conversion["target"] not in targets:
        raise ManifestError(f"{where}: {path.name} targets {', '.join(targets) or 'no platform'}, "
                            f"the manifest's conversion says {conversion['target']}")
    for side, specs in (("input", entry.inputs), ("output", entry.outputs)):
        names, listed = _rknn_names(description, side), [s.name for s in specs]
        if names != listed:
            raise ManifestError(f"{where}: {path.name} declares {side}s {names}, the manifest lists {listed}")
