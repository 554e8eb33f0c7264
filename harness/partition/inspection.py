"""`harness inspect`'s findings: a partition's settings, per-branch counts and sizes, every checksum
verified, and a verdict."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ..core.errors import ManifestError
from .declared import check_declared
from .manifest import Manifest, load_manifest, manifest_path

__all__ = ["inspect_partition"]


def inspect_partition(directory) -> dict:
    """Manifest summary, per-branch counts and sizes, every checksum verified, every file opened and
    checked against what its entry says (harness/partition/declared.py), and a verdict."""
    directory = Path(directory)
    report: dict[str, Any] = {"directory": str(directory), "manifest": str(manifest_path(directory)), "checks": [],
              "branches": {}, "reasons": []}
    try:
        manifest = load_manifest(directory)
    except ManifestError as exc:
        report.update(verdict="failed", reasons=[str(exc)])
        return report
    ex = manifest.export
    report.update(model=manifest.model.get("name"), format=manifest.format, granularity=manifest.granularity,
                  weights_sha256=manifest.weights_sha256, weights_source=manifest.weights_source,
                  **{k: ex.get(k) for k in ("dtype", "streams", "opset", "latent_size", "tokens",
                                            "text_emb_tokens", "blocks")},
                  fp32_islands={b: len(v) for b, v in ex.get("fp32_islands", {}).items()},
                  subgraphs=len(manifest.subgraphs), total_bytes=sum(e.bytes for e in manifest.entries()))
    for entry in manifest.entries():
        row = report["branches"].setdefault(entry.branch, {"count": 0, "bytes": 0, "verified": 0})
        row["count"] += 1
        row["bytes"] += entry.bytes
        try:
            manifest.verify_entry(entry)
            check_declared(manifest, entry)
            ok, reason = True, ""
            row["verified"] += 1
        except ManifestError as exc:
            ok, reason = False, str(exc)
            report["reasons"].append(reason)
        report["checks"].append({"label": entry.label, "file": entry.file, "ok": ok, "reason": reason})
    if manifest.conversion:
        _inspect_conversion(manifest, report)
    parts = [part for record in (manifest.conversion or {}).get("subgraphs", [])
             for part in (record.get("split") or {}).get("parts", [])]      # a split subgraph's
    listed = {e.file for e in manifest.entries()} | {p["file"] for p in parts} | {p["onnx_file"] for p in parts}
    report["unlisted_files"] = sorted(p.name for pattern in ("*.onnx", "*.rknn")
                                      for p in directory.glob(pattern) if p.name not in listed)
    report["verdict"] = "failed" if report["reasons"] else "ok"
    return report


def _inspect_conversion(manifest: Manifest, report: dict) -> None:
    """A converted partition: toolkit, target, precision, build time, ops on the CPU, build log hash."""
    conv = manifest.conversion
    assert conv is not None         # called for a converted partition only
    records = conv.get("subgraphs", [])
    report.update(toolkit=f"{conv.get('toolkit', 'rknn-toolkit2')} {conv['toolkit_version']}",
                  target=conv["target"], precision=conv["precision"],
                  build_seconds=round(sum(r.get("build_seconds", 0) for r in records), 1),
                  cpu_ops=sum(len(r.get("cpu_ops", [])) for r in records))
    log = conv.get("build_log") or {}
    path = manifest.directory / str(log.get("file", ""))
    ok = bool(log.get("file")) and path.is_file() and \
        hashlib.sha256(path.read_bytes()).hexdigest() == log.get("sha256")
    reason = "" if ok else f"{manifest.file}: build log '{log.get('file')}' is missing or fails its checksum"
    report["checks"].append({"label": "build log", "file": log.get("file"), "ok": ok, "reason": reason})
    if not ok:
        report["reasons"].append(reason)
