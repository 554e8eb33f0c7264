"""The partition: ONNX export of the 3-per-block subgraph bodies (+ decoder) and their manifest."""
from ..cli.partition import add_commands, render_inspection
from .manifest import (FORMAT, MANIFEST_FILE, Manifest, SubgraphEntry, TensorSpec, check_input,
                       inspect_partition, load_manifest, subgraph_index)
from .onnx_export import (DEFAULT_OPSET, MAX_OPSET, build_decoder, build_subgraph, export_partition,
                          fp16_missing_kernels, subgraph_file)

__all__ = ["add_commands", "render_inspection", "FORMAT", "MANIFEST_FILE", "Manifest", "SubgraphEntry",
           "TensorSpec", "check_input", "inspect_partition", "load_manifest", "subgraph_index",
           "DEFAULT_OPSET", "MAX_OPSET", "build_decoder", "build_subgraph", "export_partition",
           "fp16_missing_kernels", "subgraph_file"]
