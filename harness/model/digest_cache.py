"""The checkpoint digest remembered per file while the file is unchanged.

Hashing a checkpoint reads every tensor (minutes for anima-2b's 4 GB); every run needs the digest to
prove its partition was exported from these weights. A record per (file, profile shapes) keeps the
digest with the file's identity when it was hashed: size, mtime_ns, inode and device. While stat()
still gives that identity the record answers; a file rewritten in place (new mtime) or replaced by
another (new inode) is hashed again. Records live outside the model directory, which may be
read-only, in ${ANIMA_DIGEST_CACHE:-~/.cache/anima-npu/digests}; a record that cannot be written or
read only costs a re-hash.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..core.atomic import atomic_write_json
from ..core.errors import StorageError

__all__ = ["file_identity", "cache_dir", "lookup", "store"]


def file_identity(path: str | Path) -> dict[str, int]:
    """What says a file is the one that was hashed: size, mtime_ns, inode, device."""
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino, "device": st.st_dev}


def cache_dir() -> Path:
    home = os.environ.get("ANIMA_DIGEST_CACHE")
    return Path(home) if home else Path.home() / ".cache" / "anima-npu" / "digests"


def _record(path: Path, scope: str) -> Path:
    name = hashlib.sha256(f"{path.resolve()}\0{scope}".encode()).hexdigest()[:32]
    return cache_dir() / f"{name}.json"


def lookup(path: str | Path, scope: str, identity: dict[str, int]) -> str | None:
    """The remembered digest if the file still has `identity`, else None."""
    path = Path(path)
    try:
        record = json.loads(_record(path, scope).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("path") != str(path.resolve()) or record.get("scope") != scope:
        return None
    if record.get("identity") != identity or not isinstance(record.get("digest"), str):
        return None
    return record["digest"]


def store(path: str | Path, scope: str, identity: dict[str, int], digest: str) -> bool:
    """Remember `digest` for the file as it was when hashing began (`identity`: a file changed during
    the hash then no longer matches). False if the record could not be written."""
    path = Path(path)
    try:
        atomic_write_json(_record(path, scope), {"path": str(path.resolve()), "scope": scope,
                                                 "identity": identity, "digest": digest})
    except StorageError:
        return False
    return True
