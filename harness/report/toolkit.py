"""What a conversion printed: totals, and the simulator against onnxruntime FP32 per subgraph."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

__all__ = ["cosine", "cosine_rows", "print_convert_summary", "markdown_table"]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


def reference_outputs(onnx_path: Path, samples: list[list[np.ndarray]]) -> list[np.ndarray]:
    """onnxruntime FP32 outputs of the source ONNX file, one per sample and output."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    outs = []
    for arrays in samples:
        outs.extend(session.run(None, dict(zip(names, arrays))))
    return outs


def cosine_rows(result, partition) -> list[dict]:
    """Per subgraph (execution order): worst cosine and max abs error of simulator vs onnxruntime."""
    from ..partition.manifest import load_manifest
    source = load_manifest(partition)
    rows = []
    for entry in source.entries():
        stem = Path(entry.file).stem
        sim = result.sim_outputs.get(stem) or []
        ref = reference_outputs(source.path_of(entry), result.samples.get(stem, []))
        pairs = list(zip(sim, ref))
        # A layout the toolkit changed (an NHWC output for an NCHW graph) is a failure, not a cosine.
        same = all(np.shape(s) == np.shape(r) for s, r in pairs)
        rows.append({"label": entry.label, "file": f"{stem}.rknn", "shapes_match": same,
                     "cosine": min((cosine(s, r) if same else -1.0 for s, r in pairs), default=float("nan")),
                     "max_abs": max((float(np.max(np.abs(s - r))) if same else float("inf")
                                     for s, r in pairs), default=float("nan"))})
    return rows


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def print_convert_summary(result, rows=None, file=sys.stdout) -> None:
    m = result.manifest
    conv = m.conversion
    size = sum(e.bytes for e in m.entries())
    cpu = sum(len(ops) for ops in result.cpu_ops.values())
    print(f"{m.file}  {len(m.subgraphs)} subgraphs{' + decoder' if m.decoder else ''}, "
          f"{size / 1e6:.1f} MB, rknn-toolkit2 {conv['toolkit_version']}, {conv['target']}, "
          f"{conv['precision']}, {result.seconds:.1f} s, {cpu} op(s) on the CPU", file=file)
    labels = {Path(e.file).stem: e.label for e in m.entries()}
    for stem, ops in result.cpu_ops.items():      # kept by --allow-cpu-ops: each one said, and why
        for op in ops:
            why = op.get("why") or (f"input {op['input']}" if op.get("input") else "the build log gives no reason")
            print(f"  {labels.get(stem, stem)}: op {op['op']} '{op['name']}' on the {op['target']}: {why}", file=file)
    if rows:
        worst = sorted(rows, key=lambda r: r["cosine"])
        print("\nsimulator vs onnxruntime FP32 (random unit-scale inputs), worst first:\n", file=file)
        print(markdown_table(["subgraph", "file", "cosine", "max abs error"],
                             [[r["label"], r["file"], f"{r['cosine']:.7f}", f"{r['max_abs']:.2e}"]
                              for r in worst]), file=file)
