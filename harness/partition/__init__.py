"""The partition: ONNX export of the 3-per-block subgraph bodies (+ decoder) and their manifest.

Names are imported on first use (PEP 562): reading a manifest does not load onnx.
"""
import importlib

_WHERE = {name: "manifest" for name in ("FORMAT", "MANIFEST_FILE", "Manifest", "SubgraphEntry", "TensorSpec",
                                         "load_manifest", "subgraph_index")}
_WHERE.update(check_input="checks", inspect_partition="inspection")
_WHERE.update({name: "onnx_export" for name in ("build_decoder", "build_subgraph", "export_partition", "subgraph_file")})
_WHERE.update({name: "graph" for name in ("DEFAULT_OPSET", "MAX_OPSET", "fp16_missing_kernels")})

__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'harness.partition' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value
