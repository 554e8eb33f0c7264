"""What a conversion printed: totals, and the simulator against onnxruntime FP32 per subgraph."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

__all__ = ["cosine", "reference_outputs", "cosine_rows", "print_convert_summary", "markdown_table",
           "comparison_markdown", "decibels", "WORST_SHOWN"]

# compare-toolkits shows this many subgraphs, worst first; report.json holds every row.
WORST_SHOWN = 5


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
    built = {e.index: e.file for e in result.manifest.entries()}     # a split subgraph's is its plan
    rows = []
    for entry in source.entries():
        stem = Path(entry.file).stem
        sim = result.sim_outputs.get(stem) or []
        ref = reference_outputs(source.path_of(entry), result.samples.get(stem, []))
        pairs = list(zip(sim, ref))
        # A layout the toolkit changed (an NHWC output for an NCHW graph) is a failure, not a cosine.
        same = all(np.shape(s) == np.shape(r) for s, r in pairs)
        rows.append({"label": entry.label, "file": built.get(entry.index, f"{stem}.rknn"), "shapes_match": same,
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
    labels = {e.file.split(".")[0]: e.label for e in m.entries()}     # 02_block00_ffn.split.json too
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


def _verdict_line(report: dict) -> str:
    """The verdict on NEW first, then why (every failure, then every part that did not run)."""
    v, new = report["verdict"], report["new"]
    head = (f"**{new} {v['status']}** (rknn-toolkit2 {report['old']} -> {new}, {report['target']}, "
            f"{report['precision']})")
    if v["status"] == "passes":
        return (f"{head}: every op on the NPU, every subgraph's cosine >= {report['cosine_min']}, "
                f"every case ({len(report['images'])}) within its quality thresholds.")
    parts = []
    if v["failures"]:
        parts.append("; ".join(v["failures"]) + ".")
    if v["not_run"]:
        parts.append("Did not run (never a pass): " + "; ".join(v["not_run"]) + ".")
    return f"{head}: " + " ".join(parts)


def _worst_first(rows: list[dict], version: str) -> list[dict]:
    """Subgraphs that fail on `version` first, then by its cosine, lowest first."""
    def key(row):
        cell = row["versions"].get(version)
        return (True, 2.0) if cell is None else (cell["passes"], cell["cosine"])
    return sorted(rows, key=key)


def _subgraph_cells(row: dict, versions: list[str]) -> list:
    cells = [row["subgraph"]]
    for _field, show in (("cosine", lambda c: f"{c['cosine']:.7f}"),
                        ("cpu_ops", lambda c: ", ".join(c["cpu_ops"]) or "-"),
                        ("bytes", lambda c: f"{c['bytes'] / 1024:.0f}"),
                        ("build_seconds", lambda c: f"{c['build_seconds']:.2f}")):
        cells += [show(row["versions"][v]) if v in row["versions"] else "not converted" for v in versions]
    return cells


def _totals(rows: list[dict], versions: list[str]) -> list:
    cells = ["**all**"]
    of = {v: [r["versions"][v] for r in rows if v in r["versions"]] for v in versions}
    cells += [f"min {min(c['cosine'] for c in of[v]):.7f}" if of[v] else "-" for v in versions]
    cells += [str(sum(len(c["cpu_ops"]) for c in of[v])) for v in versions]
    cells += [f"{sum(c['bytes'] for c in of[v]) / 1024:.0f}" for v in versions]
    cells += [f"{sum(c['build_seconds'] for c in of[v]):.1f}" for v in versions]
    return cells


def _subgraph_section(report: dict, json_name: str, shown: int) -> list[str]:
    rows, versions = report["subgraphs"], [report["old"], report["new"]]
    if not rows:
        return ["### Subgraphs", "", "No conversion finished: no subgraph to compare."]
    worst = _worst_first(rows, report["new"])[:shown]
    head = ["subgraph"] + [f"{what} {v}" for what in ("cosine", "CPU ops", "KiB", "build s") for v in versions]
    return [f"### The {len(worst)} worst of {len(rows)} subgraphs on {report['new']} (every row: {json_name})", "",
            f"Simulator vs onnxruntime FP32 on {report['sim_samples']} random unit-scale input set(s) per "
            f"subgraph; failing ones first, then by cosine.", "",
            markdown_table(head, [_subgraph_cells(r, versions) for r in worst] + [_totals(rows, versions)])]


def _reduce_section(report: dict) -> list[str]:
    """Each failing subgraph's `harness reduce` command (the op that breaks, a repro, a remedy)."""
    rows = report.get("reduce") or []
    if not rows:
        return []
    lines = [f"### Why: `harness reduce` for each of the {len(rows)} failing subgraph(s)", ""]
    for row in rows:
        made = Path(row["repro"]).is_file()
        lines += [f"- {row['subgraph']}: `{row['command']}`",
                  f"  (repro: [{row['repro']}]({row['repro']})" + ("" if made else ", written by the command") + ")"]
    return lines + [""]


def decibels(value) -> str:
    """A PSNR as report.json holds it (a number, or "inf" for identical images), for people."""
    return f"{float(value):.2f}"


def _image_cell(row: dict, version: str) -> str:
    cell = row["versions"].get(version)
    if cell is None:
        return "did not run"
    if "error" in cell:
        return "render failed"
    text = f"SSIM {cell['ssim']:.6f}, PSNR {decibels(cell['psnr_db'])} dB"
    if cell.get("cosine") is not None:
        text += f", cosine {cell['cosine']:.7f}"
    return text + ("" if cell["passes"] else " **FAIL**")


def _image_section(report: dict) -> list[str]:
    rows, versions = report["images"], [report["old"], report["new"]]
    lines = ["### Golden cases on rknn-sim", ""]
    if not rows:
        return lines + ["No case was rendered (see the verdict)."]
    body = [[r["case"] + (" (golden unusable)" if "golden_error" in r else "")]
            + [_image_cell(r, v) for v in versions]
            + [f"SSIM {r['ssim_min']}, PSNR {r['psnr_min']} dB"
               + (f", cosine {r['cosine_min']}" if r["cosine_min"] else "")]
            for r in rows]
    return lines + [markdown_table(["case"] + versions + ["thresholds"], body)]


def comparison_markdown(report: dict, json_name: str = "report.json", shown: int = WORST_SHOWN) -> str:
    """compare-toolkits' report (report.json's content) for a pull request or a terminal: the verdict
    first, then the worst subgraphs (not all of them), the golden cases, and what was compared."""
    seconds = ", ".join(f"{v} {s:.0f} s" for v, s in report["conversion_seconds"].items()) or "none finished"
    lines = [_verdict_line(report), ""]
    lines += _subgraph_section(report, json_name, shown) + [""] + _reduce_section(report)
    lines += _image_section(report)
    lines += ["", f"Model {report['model']}, partition {report['partition']}, goldens {report['golden_dir']}; "
                  f"conversion wall time {seconds}."]
    return "\n".join(lines)
