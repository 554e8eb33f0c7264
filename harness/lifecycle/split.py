"""A split subgraph at run time (the `split` remedy, harness/toolkit/split.py): its NPU parts on the
run's backend, its host part on onnxruntime FP32 between them, as one context.

The manifest entry's file is the plan (`<stem>.split.json`); `context_for` gives a SplitContext for
one and the backend's own context for any other file, so the lifecycle strategies load, init, run
and release a split subgraph as they do every subgraph (the lifecycle times the whole composition).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from ..backends.base import BackendOptions, Context, create_context
from ..core.errors import ManifestError
from ..toolkit.split import PLAN_SUFFIX, file_sha256

__all__ = ["context_for", "SplitContext", "is_split"]


def is_split(path) -> bool:
    return str(path).endswith(PLAN_SUFFIX)


def context_for(options: BackendOptions, label: str, path) -> Context:
    """The context that runs the subgraph file `path` (not yet loaded)."""
    if is_split(path):
        return SplitContext(label, options)
    return create_context(options, label)


class _HostPart:
    """A host part: onnxruntime FP32, one thread (it runs between NPU calls, as the host's AdaLN)."""

    def __init__(self, path: Path):
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        names = [i.name for i in self.session.get_inputs()]
        return self.session.run(None, {n: np.asarray(a, np.float32) for n, a in zip(names, inputs)})

    def release(self) -> None:
        self.session = None


class SplitContext(Context):
    """The parts of one split subgraph, run in order; tensors passed on by name."""

    backend_name = "split"

    def __init__(self, label: str, options: BackendOptions):
        super().__init__(label, options)
        self.backend_name = f"{options.backend}+host"
        self._plan: dict = {}
        self._parts: list = []

    def load(self, path: Path) -> None:
        path = Path(path)
        try:
            self._plan = json.loads(path.read_text())
            parts = self._plan["parts"]
        except (OSError, ValueError, KeyError) as exc:
            raise self.error("load", f"split plan {path}: {exc}") from None
        self._mark_live()
        try:
            for part in parts:
                self._load_part(path, part)
        except BaseException:
            # a refused or failed part leaves nothing loaded: the parts so far and this context released
            # (the part's own error is the one to see, not a release's)
            with contextlib.suppress(Exception):
                self.release()
            raise

    def _load_part(self, path: Path, part: dict) -> None:
        file = path.parent / part["file"]
        if not file.is_file() or file_sha256(file) != part["sha256"]:
            raise ManifestError(f"{path}: {self.label}: part {part['file']} is missing or not the one "
                                f"converted (sha256 differs from the plan)")
        if part["on"] == "host":
            self._parts.append((part, _HostPart(file)))
        else:
            ctx = create_context(self.options, f"{self.label} {part['name']}")
            self._parts.append((part, ctx))
            ctx.load(file)

    def init(self) -> None:
        for part, ctx in self._parts:
            if part["on"] == "npu":
                ctx.init()

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        known = dict(zip(self._plan["inputs"], inputs))
        for part, ctx in self._parts:
            outs = ctx.run([known[name] for name in part["inputs"]])
            known.update(zip(part["outputs"], outs))
        return [known[name] for name in self._plan["outputs"]]

    def release(self) -> None:
        errors = []
        for _, ctx in self._parts:
            try:
                ctx.release()
            except Exception as exc:  # release every part whatever one of them raises
                errors.append(exc)
        self._parts = []
        self._mark_released()
        if errors:
            raise errors[0]
