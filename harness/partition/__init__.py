"""The partition: ONNX export of the 3-per-block subgraph bodies (+ decoder) and their manifest.

Names are imported on first use (PEP 562): reading a manifest does not load onnx.
"""
from ..core.lazy import lazy_getattr

_WHERE = {name: "manifest" for name in ("FORMAT", "MANIFEST_FILE", "Manifest", "SubgraphEntry", "TensorSpec",
                                         "load_manifest", "subgraph_index")}
_WHERE.update(check_input="checks", inspect_partition="inspection")
_WHERE.update({name: "onnx_export" for name in ("ExportSettings", "build_decoder", "build_subgraph",
                                                "export_partition", "subgraph_file")})
_WHERE.update({name: "graph" for name in ("DEFAULT_OPSET", "MAX_OPSET", "float16_missing_kernels")})

__all__ = list(_WHERE)
__getattr__ = lazy_getattr(__name__, _WHERE)
