"""What the run's process tree holds, read once per lifecycle cycle by the soak gate: memory (PSS, RSS,
USS), open file descriptors, threads and, where the kernel shows them, DMA-BUF and NPU driver memory.

The process tree is this process and every process it started (the toolkit simulator's worker, prefetch
workers), as the memory guard counts it: a context a worker holds costs the board as much as one held here.
The kernel files are read under `root` (the suite's --telemetry-root, "/" on a board):
    proc/<pid>/fdinfo/<fd>             a DMA-BUF descriptor shows `size:` and `exp_name:` (Linux 5.x):
                                       the DMA-BUF bytes the tree holds open
    sys/kernel/debug/dma_buf/bufinfo   every DMA-BUF of the system, ending "Total N objects, B bytes"
                                       (debugfs: root only)
    sys/kernel/debug/rknpu/mm          the RKNPU driver's SRAM, "SRAM total size: T, used: U, free: F"
    proc/rknpu/mm                      (the driver's procfs copy of the same; only with SRAM configured)
A figure whose file is missing or unreadable is not read as 0: it is left out of the samples and named
in `not_measured` with the reason.
"""
from __future__ import annotations

import errno
import os
import re
import resource
import time
from pathlib import Path

import psutil

__all__ = ["ResourceSampler", "RESOURCES", "MEMORY_RESOURCES", "COUNT_RESOURCES", "resource_limits"]

# name -> what it is, in the words every message uses
RESOURCES = {
    "pss": "PSS",
    "rss": "RSS",
    "uss": "USS (private memory)",
    "fds": "open file descriptors",
    "threads": "threads",
    "dmabuf": "DMA-BUF held open (fdinfo)",
    "dmabuf_system": "DMA-BUF of the system (debugfs dma_buf)",
    "npu_sram": "RKNPU driver SRAM used (debugfs rknpu/mm)",
}
MEMORY_RESOURCES = ("pss", "rss", "uss", "dmabuf", "dmabuf_system", "npu_sram")
COUNT_RESOURCES = ("fds", "threads")

BUFINFO = ("sys/kernel/debug/dma_buf/bufinfo",)
RKNPU_MM = ("sys/kernel/debug/rknpu/mm", "proc/rknpu/mm")
_BUFINFO_TOTAL = re.compile(r"Total\s+\d+\s+objects,\s+(\d+)\s+bytes")
_SRAM_USED = re.compile(r"SRAM total size:\s*\d+,\s*used:\s*(\d+)")

# Listing descendants scans /proc (several ms here): a cycle of a few ms relists at most this often.
_RELIST_S = 0.5


def _why(exc: OSError) -> str:
    return "permission denied" if exc.errno in (errno.EACCES, errno.EPERM) else (exc.strerror or str(exc))


def _first_readable(root: Path, candidates) -> tuple[Path | None, str]:
    """The first candidate file that reads, or (None, why none did)."""
    reasons = []
    for rel in candidates:
        path = root / rel
        try:
            path.read_bytes()
            return path, ""
        except OSError as exc:
            reasons.append(f"{path}: {_why(exc)}")
    return None, "; ".join(reasons)


def _fdinfo_dmabuf(fdinfo: Path) -> int:
    """Bytes of the DMA-BUFs among one process's descriptors (an fd closed while read is skipped)."""
    total = 0
    try:
        names = os.listdir(fdinfo)
    except OSError:
        return 0             # the process ended between the listing and this read
    for name in names:
        try:
            text = (fdinfo / name).read_text()
        except OSError:
            continue
        if "exp_name:" not in text:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key == "size":
                total += int(value.strip())
                break
    return total


def resource_limits() -> dict[str, int | None]:
    """The per-process limits a count runs into: RLIMIT_NOFILE for descriptors, RLIMIT_NPROC (else the
    kernel's threads-max) for threads; None where there is none."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc: int | None = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if nproc == resource.RLIM_INFINITY:
        try:
            nproc = int(Path("/proc/sys/kernel/threads-max").read_text())
        except (OSError, ValueError):
            nproc = None
    return {"fds": None if nofile == resource.RLIM_INFINITY else nofile, "threads": nproc}


class ResourceSampler:
    """One reading of every measurable resource of the process tree per call; which resources are
    measurable is decided once, at construction (a worker started later is found by the relisting)."""

    def __init__(self, root: str | Path = "/", relist_after: float = _RELIST_S):
        self.root = Path(root)
        self.relist_after = relist_after
        self._me = psutil.Process()
        self._children: list[psutil.Process] = []
        self._listed_at = -float("inf")
        self.not_measured: dict[str, str] = {}
        self.processes = 0              # the most processes one reading summed
        self._bufinfo, why = _first_readable(self.root, BUFINFO)
        if self._bufinfo is None:
            self.not_measured["dmabuf_system"] = why
        self._rknpu_mm, why = _first_readable(self.root, RKNPU_MM)
        if self._rknpu_mm is None:
            self.not_measured["npu_sram"] = why
        own_fdinfo = self.root / "proc" / str(self._me.pid) / "fdinfo"
        if not os.access(own_fdinfo, os.R_OK | os.X_OK):
            self.not_measured["dmabuf"] = f"{own_fdinfo}: not readable"
        try:
            self._me.memory_full_info()
        except (psutil.AccessDenied, NotImplementedError) as exc:
            self.not_measured["pss"] = self.not_measured["uss"] = f"memory_full_info: {exc}"

    @property
    def measured(self) -> tuple[str, ...]:
        return tuple(r for r in RESOURCES if r not in self.not_measured)

    def _tree(self) -> list[psutil.Process]:
        now = time.monotonic()
        if now - self._listed_at >= self.relist_after:
            self._children = self._me.children(recursive=True)
            self._listed_at = now
        return [self._me, *self._children]

    def read(self) -> dict[str, int]:
        """{resource: value} for every measured resource (bytes or a count), summed over the tree."""
        totals = dict.fromkeys(self.measured, 0)
        tree = self._tree()
        self.processes = max(self.processes, len(tree))
        for proc in tree:
            try:
                self._add_process(proc, totals)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue        # ended since the listing: it holds nothing now
        if self._bufinfo is not None:
            match = _BUFINFO_TOTAL.search(self._read(self._bufinfo))
            totals["dmabuf_system"] = int(match.group(1)) if match else 0
        if self._rknpu_mm is not None:
            match = _SRAM_USED.search(self._read(self._rknpu_mm))
            totals["npu_sram"] = int(match.group(1)) if match else 0
        return totals

    def _add_process(self, proc: psutil.Process, totals: dict) -> None:
        with proc.oneshot():
            if "uss" in totals:
                full = proc.memory_full_info()
                totals["pss"] += full.pss
                totals["uss"] += full.uss
                totals["rss"] += full.rss
            else:
                totals["rss"] += proc.memory_info().rss
            totals["fds"] += proc.num_fds()
            totals["threads"] += proc.num_threads()
        if "dmabuf" in totals:
            totals["dmabuf"] += _fdinfo_dmabuf(self.root / "proc" / str(proc.pid) / "fdinfo")

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""
