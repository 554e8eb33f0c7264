"""The partition a run uses when none is named: the export command's default directory for these
weights, exported on first use, so new weights never run against subgraphs exported from old ones.
Every command and the gates get their partition here."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import ManifestError
from ..core.locks import file_lock
from ..model.config import ModelConfig
from ..partition.manifest import default_partition_dir, load_manifest, manifest_path

if TYPE_CHECKING:       # onnx_export imports onnx: only a run that exports pays for it
    from ..partition.onnx_export import ExportSettings

__all__ = ["exported_partition", "export_with_progress", "is_current"]


def export_with_progress(weights, cfg: ModelConfig, out, settings: ExportSettings, quiet: bool = False):
    """export_partition with a progress bar on stderr (the exporter itself prints nothing)."""
    from ..partition.onnx_export import export_partition, planned_files
    from ..report.terminal import progress_bar
    total = planned_files(cfg, settings.blocks, settings.granularity)
    with progress_bar(total, f"export {cfg.name} {settings.precision}", disable=quiet) as advance:
        return export_partition(weights, cfg, out, settings, on_file=advance)


def exported_partition(bundle, precision: str, fake_quant: str | None = None, quiet: bool = True,
                       root: Path | None = None, granularity: str = "branch") -> Path:
    """The export command's default directory for these weights (under `root` if given, e.g. the
    suite's cache), exported on first use."""
    partition = default_partition_dir(bundle.cfg, bundle.digest, precision, fake_quant, granularity=granularity)
    if root is not None:
        partition = Path(root) / partition.name
    # Two processes on one cache (two bin/harness runs, two test workers) export it once: the second
    # waits, then finds it current, instead of removing the manifest under the first one's run.
    with file_lock(partition.parent / f".{partition.name}.lock"):
        if not is_current(partition):
            print(f"exporting the partition to {partition} ({precision}, first use)", file=sys.stderr)
            from ..partition.onnx_export import ExportSettings
            export_with_progress(bundle.weights_source, bundle.cfg, partition,
                                 ExportSettings(precision, fake_quant=fake_quant, granularity=granularity),
                                 quiet=quiet)
    return partition


def is_current(partition: Path) -> bool:
    """A kept partition is used only if this suite reads its manifest and it has the inputs this
    exporter names: the directory name holds the weights digest, not the exporter's version, so a
    partition written before a change of the manifest or of a fused subgraph's input names is
    exported (or converted) again instead of refused or fed the wrong inputs."""
    from ..partition.fused import input_names
    if not manifest_path(partition).exists():
        return False
    try:
        fused = [e for e in load_manifest(partition).subgraphs if e.blocks is not None]
    except ManifestError:
        return False
    return all(e.blocks is not None and [spec.name for spec in e.inputs] == input_names(e.blocks) for e in fused)
