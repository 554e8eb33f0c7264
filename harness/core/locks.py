"""The one file lock: flock(2) on a lock file of its own. The kernel drops it when the holder's file
is closed or its process dies, even by SIGKILL, so a lock never goes stale and needs no clean-up."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import ConfigError

__all__ = ["acquire", "release", "file_lock", "output_lock"]


def acquire(path: str | Path, blocking: bool = True, shared: bool = False) -> int | None:
    """Hold `path`'s lock (created if absent); the open descriptor, or None when not blocking and
    another holder has it. Each call opens the file anew: flock conflicts between open files, also
    within one process. `shared`: held beside other shared holders, never beside an exclusive one."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release(fd: int) -> None:
    os.close(fd)        # closing drops the flock


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[int]:
    """Hold `path`'s lock for the block, waiting for any other holder."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = acquire(path)
    assert fd is not None           # a blocking acquire waits; only a non-blocking one gives up
    try:
        yield fd
    finally:
        release(fd)


def _lock_of(target: Path) -> Path:
    """The lock file of one output path: outside the user's folder (which it would litter), one per user."""
    folder = Path(tempfile.gettempdir()) / f"anima-npu-outputs-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / (hashlib.sha256(str(target).encode()).hexdigest()[:24] + ".lock")


@contextlib.contextmanager
def output_lock(target: str | Path, option: str) -> Iterator[None]:
    """Hold `target` (a command's --out) for the block; a second run writing there is refused in one line
    naming the holder, instead of both finishing and the last one's files winning."""
    target = Path(target).resolve()
    path = _lock_of(target)
    fd = acquire(path, blocking=False)
    if fd is None:
        holder = path.read_text(errors="replace").strip()[:200] or "another run"
        raise ConfigError(f"{option} {target}: another run is writing there ({holder}); wait for it to end "
                          f"or give this run its own {option}")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}".encode(), 0)
        yield
    finally:
        release(fd)
