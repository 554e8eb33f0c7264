"""A subgraph split at a node range so the host runs that range in FP32 (as it runs AdaLN), the rest
on the NPU: the `split` remedy of `harness reduce`, built by `harness convert`.

conversion.toml (toolkit/remedies.py) names the range by node position and by its first and last
node, so a range that no longer fits the source ONNX (another export) is refused, not shifted:

    [subgraphs.14_block04_ffn]
    split = { start = 0, end = 7, first = "layer1", last = "y" }

convert cuts the subgraph's ONNX into up to three parts (toolkit/cut.py): nodes [0, start) and
[end, n) built by the toolkit as `<stem>.part<k>.rknn` (their ONNX kept beside them: the simulator
rebuilds from it), [start, end) kept as `<stem>.part<k>.onnx` for onnxruntime on the host. The
manifest entry's file is then the plan, `<stem>.split.json`: every part in order, what it reads and
writes (tensor names) and its sha256; the runtime runs it through lifecycle/split.py.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["SPLIT_KEY", "PLAN_SUFFIX", "Part", "check_split", "cut_parts", "write_plan", "split_setting", "file_sha256"]

SPLIT_KEY = "split"
PLAN_SUFFIX = ".split.json"


@dataclass
class Part:
    """One part of a split subgraph: `on` npu or host, its nodes [start, end), tensors in and out."""
    name: str
    on: str
    start: int
    end: int
    inputs: list[str]
    outputs: list[str]
    onnx_file: str              # beside the plan
    file: str                   # what runs: the .rknn (npu) or the .onnx (host)


def _node_name(node) -> str:
    return node.name or node.output[0]


def split_setting(graph, start: int, end: int) -> dict:
    """The conversion.toml table of a host range (what `harness reduce` writes)."""
    return {"start": start, "end": end, "first": _node_name(graph.nodes[start]),
            "last": _node_name(graph.nodes[end - 1])}


def check_split(setting: dict, nodes, where: str) -> tuple[int, int]:
    """(start, end) of a split setting, checked against the graph's nodes; ConfigError naming `where`."""
    try:
        start, end = int(setting["start"]), int(setting["end"])
        first, last = str(setting["first"]), str(setting["last"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{where}: split = {{ start, end, first, last }} (node positions and names), "
                          f"got {setting!r}") from None
    if not 0 <= start < end <= len(nodes):
        raise ConfigError(f"{where}: split nodes {start}-{end - 1} are not in the subgraph's {len(nodes)} nodes")
    have = (_node_name(nodes[start]), _node_name(nodes[end - 1]))
    if have != (first, last):
        raise ConfigError(f"{where}: split names nodes {first} .. {last}, the ONNX has {have[0]} .. {have[1]} "
                          f"at {start}-{end - 1} (another export: run harness reduce again)")
    return start, end


def cut_parts(entry, onnx_path: Path, setting: dict, folder: Path, where: str) -> list[Part]:
    """The subgraph's ONNX cut at the host range; every part's ONNX written into `folder`."""
    import onnx

    from .cut import Graph, reference_values
    from .samples import sample_inputs
    model = onnx.load(str(onnx_path))
    graph = Graph(model)
    start, end = check_split(setting, graph.nodes, where)
    # the cut needs each range input's shape and dtype (and the value of a constant-only one): any
    # input of the subgraph's shapes gives them
    values = reference_values(model, sample_inputs(entry, 1, 0)[0])
    stem = Path(entry.file).stem
    ranges = [(a, b, on) for a, b, on in ((0, start, "npu"), (start, end, "host"), (end, len(graph.nodes), "npu"))
              if a < b]
    parts = []
    for k, (a, b, on) in enumerate(ranges):
        segment = graph.segment(a, b, values)
        name = f"{stem}.part{k}"
        onnx.save(segment.model, str(folder / f"{name}.onnx"))
        parts.append(Part(name, on, a, b, segment.inputs, segment.outputs, f"{name}.onnx",
                          f"{name}.rknn" if on == "npu" else f"{name}.onnx"))
    return parts


def file_sha256(path: Path) -> str:
    """A built file's sha256, as manifests and split plans record it (convert and the run check it)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def write_plan(folder: Path, entry, parts: list[Part]) -> Path:
    """`<stem>.split.json` in `folder`: the parts in order with the sha256 of what each runs."""
    plan = {"subgraph": entry.label, "inputs": [s.name for s in entry.inputs],
            "outputs": [s.name for s in entry.outputs],
            "parts": [{**asdict(p), "sha256": file_sha256(folder / p.file)} for p in parts]}
    path = folder / f"{Path(entry.file).stem}{PLAN_SUFFIX}"
    path.write_text(json.dumps(plan, indent=1))
    return path


def part_feeds(onnx_path: Path, parts: list[Part], sets) -> dict[str, list[list]]:
    """Each part's inputs for sample input sets: the FP32 values onnxruntime computes for them from
    the subgraph's inputs (convert's simulator check judges each NPU part on what it would get from
    an FP32 host; the subgraph's output is then its last part's)."""
    import onnx

    from .cut import reference_values
    model = onnx.load(str(onnx_path))
    values = [reference_values(model, arrays) for arrays in sets]
    return {p.name: [[v[name] for name in p.inputs] for v in values] for p in parts}


def host_outputs(folder: Path, part: Part, feeds) -> list:
    """A host part's FP32 outputs (onnxruntime), one per input set and output, in order."""
    import onnxruntime as ort
    session = ort.InferenceSession(str(folder / part.onnx_file), providers=["CPUExecutionProvider"])
    return [out for arrays in feeds for out in session.run(None, dict(zip(part.inputs, arrays)))]
