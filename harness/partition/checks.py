"""What a subgraph is given and gives back, checked against its manifest entry: input names, shapes and
dtypes; output count, shapes and dtypes."""
from __future__ import annotations

import numpy as np

from ..core.errors import ManifestError
from .manifest import SubgraphEntry

__all__ = ["check_input", "check_outputs"]


def check_input(entry: SubgraphEntry, name: str, array) -> None:
    """Refuse an input whose shape or dtype disagrees with the manifest, naming subgraph and input."""
    spec = entry.input(name)
    arr = np.asarray(array)
    if tuple(arr.shape) != spec.shape or arr.dtype.name != spec.dtype:
        raise ManifestError(f"{entry.label}: input '{name}' is {arr.dtype.name} {list(arr.shape)}, "
                            f"manifest expects {spec.dtype} {list(spec.shape)} (file {entry.file})")


def check_outputs(entry: SubgraphEntry, outputs) -> np.ndarray:
    """The first output, after checking every output's count, shape and dtype against the manifest.

    A wrong shape would otherwise broadcast into the residual stream and pass silently. A float16
    output may come back as float32: RKNNLite's inference() returns float32 unless told otherwise.
    """
    if outputs is None or len(outputs) != len(entry.outputs):
        got = "no" if outputs is None else len(outputs)
        raise ManifestError(f"{entry.label}: returned {got} outputs, manifest declares "
                            f"{len(entry.outputs)} (file {entry.file})")
    for spec, array in zip(entry.outputs, outputs):
        arr = np.asarray(array)
        dtype_ok = arr.dtype.name == spec.dtype or (spec.dtype == "float16" and arr.dtype == np.float32)
        if tuple(arr.shape) != spec.shape or not dtype_ok:
            raise ManifestError(f"{entry.label}: output '{spec.name}' is {arr.dtype.name} {list(arr.shape)}, "
                                f"manifest declares {spec.dtype} {list(spec.shape)} (file {entry.file})")
    return np.asarray(outputs[0])
