"""Names a package exports, imported on first use (PEP 562): a process that needs one part (a
prefetch worker, a manifest reader) does not pay for importing the rest (onnx, onnxruntime)."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, where: dict[str, str]) -> Callable[[str], object]:
    """The module `__getattr__` of `package`: each name of `where` from its submodule, kept once read."""
    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{where[name]}", package), name)
        setattr(sys.modules[package], name, value)
        return value
    return __getattr__
