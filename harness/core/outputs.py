"""Checks on where a run writes, made before the run spends time: the folder can be written, its
filesystem has room for the reports, and (for the suite's artifacts folder) no other run is using
it. Every failure is a StorageError or ConfigError naming the option and the path.

The artifacts folder holds exactly one run. A lock (flock on `.lock`, released by the kernel even
after SIGKILL) refuses a second concurrent run with a line naming the holder; once the lock is held,
the previous run's files are removed so nothing from another run sits beside this run's report.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from .errors import ConfigError, StorageError
from .locks import acquire, release

__all__ = ["check_writable", "check_free_space", "ArtifactsLock", "MARKER"]

MARKER = ".anima-artifacts"      # this folder holds suite artifacts: the next run may clear it
LOCK_FILE = ".lock"


def _nearest_existing(path: Path) -> Path:
    return next((p for p in [path, *path.parents] if p.exists()), Path("."))


def check_writable(directory: Path, option: str) -> None:
    """`directory` exists (or can be created) and a file can be made in it."""
    existing = _nearest_existing(directory)
    if not existing.is_dir():
        raise StorageError(f"{option}={directory}: {existing} is not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StorageError(f"{option}={directory}: cannot create files under {existing} (not writable)")


def check_free_space(directory: Path, need: int, option: str) -> None:
    """At least `need` bytes free on the filesystem that will hold `directory`."""
    existing = _nearest_existing(directory)
    free = shutil.disk_usage(existing).free
    if free < need:
        raise StorageError(f"{option}={directory}: only {free / 2**20:.0f} MiB free on its filesystem, "
                           f"the run needs {need / 2**20:.0f} MiB for its reports (--min-free)")


class ArtifactsLock:
    """Hold `directory` for this run; `claim()` raises ConfigError when another run holds it."""

    def __init__(self, directory: Path, default: Path | None = None):
        self.directory = Path(directory)
        self.default = default       # the repository's own artifacts/: always the suite's
        self._fd: int | None = None

    def claim(self) -> ArtifactsLock:
        path = self.directory / LOCK_FILE
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = acquire(path, blocking=False)
        except OSError as exc:
            raise StorageError(f"--artifacts={self.directory}: cannot write in it ({exc.strerror or exc})") from None
        if fd is None:
            holder = path.read_text(errors="replace").strip()[:200] or "another run"
            raise ConfigError(f"--artifacts={self.directory}: in use by {holder}; wait for it to end or "
                              f"give this run its own folder (--artifacts=OTHER)")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}".encode(), 0)
        self._fd = fd
        return self

    def clear_previous(self) -> None:
        """Remove the previous run's files; refuse a folder that never held suite artifacts."""
        entries = [p for p in self.directory.iterdir() if p.name != LOCK_FILE]
        owned = (self.directory / MARKER).exists() or (
            self.default is not None and self.directory.resolve() == self.default.resolve())
        if entries and not owned:
            raise ConfigError(f"--artifacts={self.directory}: holds files that are not a suite run's "
                              f"(no {MARKER}); name a new or empty folder")
        try:
            for path in entries:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            (self.directory / MARKER).write_text("artifacts of one suite run; the next run clears them\n")
        except OSError as exc:
            raise StorageError(f"--artifacts={self.directory}: cannot clear the previous run's files "
                               f"({exc.filename}: {exc.strerror or exc})") from None

    def release(self) -> None:
        if self._fd is not None:
            release(self._fd)
            self._fd = None
