"""The embedded model's converted partition, shipped in the repository for a board's first run.

A fresh RK3588 has no rknn-toolkit2 (it converts on the PC), so `bin/harness generate` there would have
no .rknn files to run. `models/embedded-rk3588-float16.tar.xz` holds what `bin/harness convert` builds
from the embedded model's FP32 export with the pinned toolkit (FP16, target rk3588): 40 MB of .rknn files
and build log, 3.2 MB packed. It is unpacked on first use under the run's cache folder and its manifest
verified (every file's size and sha256); it serves only the weights it was converted from. A test holds
it to today's export and conversion (tests/unit/test_shipped_partition.py), so it cannot go stale.

Rebuild it after the embedded model or the export changes (the test says so):
    bin/harness export --model-dir=models/embedded --precision=float32 --out=out/embedded-fp32 --quiet
    bin/harness convert out/embedded-fp32 --out=out/embedded-rknn --quiet
    python -m harness.runtime.shipped out/embedded-rknn
"""
from __future__ import annotations

import io
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from ..core.atomic import atomic_path
from ..core.errors import ConfigError, ManifestError
from ..core.locks import file_lock
from ..partition.manifest import MANIFEST_FILE, load_manifest

__all__ = ["SHIPPED", "shipped_partition", "shipped_manifest", "pack"]

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "embedded-rk3588-float16.tar.xz"


def _members(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r|xz")        # a stream: read in order, never all of it to find one
    except (OSError, tarfile.TarError) as exc:
        raise ManifestError(f"{archive}: not a readable .tar.xz ({exc})") from None


def shipped_manifest(archive: Path = SHIPPED) -> dict:
    """The shipped partition's manifest.json, the archive's first member (pack puts it there): read
    without unpacking the 40 MB behind it, as every board run without --partition does."""
    import json
    with _members(archive) as tar:
        member = next(iter(tar), None)
        source = tar.extractfile(member) if member is not None and member.name == MANIFEST_FILE else None
        if source is None:
            raise ManifestError(f"{archive}: its first member is not {MANIFEST_FILE}")
        return json.load(source)


def shipped_partition(bundle, cache_dir: Path, precision: str = "float16", granularity: str = "branch",
                      archive: Path = SHIPPED) -> Path:
    """The shipped partition unpacked under `cache_dir` (once) and verified; ConfigError for other weights,
    another precision or another granularity (those are converted on the PC and named by --partition)."""
    if precision != "float16" or str(granularity) != "branch":
        raise ConfigError(f"--precision {precision} --granularity {granularity} with --backend rknnlite needs "
                          f"--partition DIR with the converted .rknn subgraphs: the shipped partition is the "
                          f"embedded model's float16 branch partition (convert others on the PC: docs/board.md)")
    manifest = shipped_manifest(archive)
    if manifest.get("weights_sha256") != bundle.digest:
        raise ConfigError(f"--backend rknnlite needs --partition DIR with the converted .rknn subgraphs: "
                          f"{archive.name} holds model {manifest.get('model', {}).get('name', '?')}'s, "
                          f"converted from other weights than {bundle.cfg.name}'s (convert them on the PC: "
                          f"docs/board.md)")
    target = Path(cache_dir) / "partitions" / archive.name.removesuffix(".tar.xz")
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{target.name}.lock"):
        if not _unpacked(target, manifest):
            _unpack(archive, target)
    load_manifest(target).verify()
    return target


def _unpacked(target: Path, manifest: dict) -> bool:
    try:
        return load_manifest(target).conversion == manifest.get("conversion")
    except ManifestError:
        return False


def _unpack(archive: Path, target: Path) -> None:
    """Unpacked beside the target and renamed into place: never a half-unpacked partition."""
    print(f"unpacking the shipped partition {archive.name} to {target} (first use)", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with _members(archive) as tar:
            for member in tar:
                _extract(tar, member, work, archive)
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, work: Path, archive: Path) -> None:
    # Plain files at the top only (a partition is flat): Debian 12's Python 3.11.2 has no extraction filter.
    source = tar.extractfile(member) if member.isfile() else None
    if source is None or "/" in member.name or member.name.startswith("."):
        raise ManifestError(f"{archive}: '{member.name}' is not a partition file")
    with open(work / member.name, "wb") as fh:
        shutil.copyfileobj(source, fh)


def pack(partition: Path, archive: Path = SHIPPED) -> Path:
    """A converted partition as a byte-reproducible .tar.xz: the manifest first, then the files by name; no
    times, owners or modes."""
    manifest = load_manifest(partition)
    manifest.verify()
    if not manifest.conversion:
        raise ConfigError(f"{manifest.file}: not a converted partition (bin/harness convert builds one)")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:
        files = sorted(p for p in Path(partition).iterdir() if p.is_file() and p.name != MANIFEST_FILE)
        for path in [Path(partition) / MANIFEST_FILE, *files]:
            info = tarfile.TarInfo(path.name)
            info.size, info.mode = path.stat().st_size, 0o644
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
    with atomic_path(archive) as tmp:
        Path(tmp).write_bytes(buffer.getvalue())
    return archive


if __name__ == "__main__":
    print(pack(Path(sys.argv[1])))
