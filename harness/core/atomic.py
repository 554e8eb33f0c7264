"""Atomic file writes: temporary file in the same directory, flushed and fsynced, then renamed.

A run killed at any instant leaves either the old file or the new one, never a torn one: rename()
within one filesystem is atomic, and the data is on disk before the name points at it. A writer
killed with SIGKILL leaves its temporary file (".NAME.PID.XXXXXXXX.tmp"); `sweep_temporaries`
removes those whose writer is gone, on the next run.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

from .errors import StorageError

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_save_npy",
           "atomic_directory", "sweep_temporaries"]

# The writer's pid in the name tells a dead writer's leftover from a live writer's file in flight.
_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)\.[A-Za-z0-9_]{8}\.tmp$")

_UMASK = os.umask(0)        # read once, at import (single-threaded), and put back at once
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path beside `path`; on success fsync it and rename it over `path`."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
        # mkstemp makes 0600; goldens, reports and a shared history must get the usual permissions.
        os.fchmod(fd, 0o666 & ~_UMASK)
        os.close(fd)
        yield Path(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        # Name the user's path, not the temporary file the OS error names.
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def sweep_temporaries(directory: str | Path) -> list[Path]:
    """Remove temporary files a killed writer left in `directory`; returns what was removed.

    A temporary file whose writer process is still alive is another run's write in flight and
    stays. Never raises: a directory that cannot be listed has nothing this run can clean.
    """
    import psutil
    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _TEMP.match(name)
        if not match or psutil.pid_exists(int(match["pid"])):
            continue
        path = Path(directory) / name
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


def _fsync_dir(directory: Path) -> None:
    # The rename itself lives in the directory entry: sync it so it survives power loss too.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_directory(path: str | Path):
    """Yield a hidden staging directory beside `path`; on success rename it to `path`.

    A command that fails or is killed part-way leaves no half-written output directory under the
    name a later step would trust (only a `.NAME.partial-*` folder, removed on any Python-level
    failure). `path` must not exist yet, or be an empty directory.
    """
    import shutil
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path} already exists and is not an empty directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
    os.chmod(staging, 0o777 & ~_UMASK)
    try:
        yield staging
        if path.exists():
            path.rmdir()
        os.replace(staging, path)
        _fsync_dir(path.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()


def atomic_save_npy(path: str | Path, array) -> None:
    """np.save through the atomic writer (a file object: np.save on a path would append '.npy')."""
    import numpy as np
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, np.asarray(array), allow_pickle=False)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj):
    import numpy as np
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
