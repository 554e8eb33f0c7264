"""The one file lock: flock(2) on a lock file of its own. The kernel drops it when the holder's file
is closed or its process dies, even by SIGKILL, so a lock never goes stale and needs no clean-up."""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["acquire", "release", "file_lock"]


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
