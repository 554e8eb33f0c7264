"""What the run's process tree holds, read once per lifecycle cycle by the soak gate, per process and in
total: memory (RSS, USS, PSS, PSS less its file-backed part), open file descriptors, threads and, where the
kernel shows them, DMA-BUF and the NPU driver's own memory.

The process tree is this process and every process it started (the toolkit simulator's worker, prefetch
workers), as the memory guard counts it: a context a worker holds costs the board as much as one held here.
Each process is read on its own (`last`: pid -> reading), so a gate can name the process that grew.
Memory is one read of /proc/<pid>/smaps_rollup: RSS, PSS, USS (Private_*) and "host", PSS less its
file-backed part (Pss_Anon + Pss_Shmem, what probe-board calls a context's host memory): USS and PSS move
when another process maps or unmaps a library this one maps (USS falls when a page we alone mapped becomes
shared), host memory does not. The kernel files are read under `root` (the suite's --telemetry-root):
    proc/<pid>/fdinfo/<fd>             a DMA-BUF descriptor shows `size:` and `exp_name:` (Linux 5.x): the
                                       DMA-BUF bytes the process holds open; a DRM descriptor shows the DRM
                                       fdinfo keys (Documentation/gpu/drm-usage-stats.rst) `drm-total-<region>:`
                                       (6.x) or `drm-memory-<region>:` (5.19 on): the driver's buffers of that
                                       client, never exported as DMA-BUF; each drm-client-id counted once
    sys/kernel/debug/dma_buf/bufinfo   every DMA-BUF of the system, ending "Total N objects, B bytes"
                                       (debugfs: root only)
    sys/kernel/debug/rknpu/mm          the RKNPU driver's SRAM, "SRAM total size: T, used: U, free: F"
    proc/rknpu/mm                      (the driver's procfs copy of the same; only with SRAM configured)
    proc/meminfo                       CmaTotal - CmaFree: the contiguous memory the drivers hold (the RKNPU
                                       driver allocates from CMA where the board has no IOMMU mapping for it)
    sys/kernel/debug/rknpu/load        "NPU load:  Core0: 12%, ..." (a figure shown beside the run, not judged)
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

from ..core.workers import WORKER_ENV

__all__ = ["ResourceSampler", "RESOURCES", "MEMORY_RESOURCES", "COUNT_RESOURCES", "SYSTEM_RESOURCES",
           "resource_limits"]

# name -> what it is, in the words every message uses
RESOURCES = {
    "pss": "PSS",
    "rss": "RSS",
    "uss": "USS (private memory)",
    "host": "PSS less file-backed (host memory)",
    "fds": "open file descriptors",
    "threads": "threads",
    "dmabuf": "DMA-BUF held open (fdinfo)",
    "drm": "DRM driver memory (fdinfo drm-total/drm-memory)",
    "dmabuf_system": "DMA-BUF of the system (debugfs dma_buf)",
    "npu_sram": "RKNPU driver SRAM used (debugfs rknpu/mm)",
    "cma": "CMA in use (meminfo CmaTotal - CmaFree)",
}
MEMORY_RESOURCES = ("pss", "rss", "uss", "host", "dmabuf", "drm", "dmabuf_system", "npu_sram", "cma")
COUNT_RESOURCES = ("fds", "threads")
SYSTEM_RESOURCES = ("dmabuf_system", "npu_sram", "cma")      # of the board, not of one process

BUFINFO = ("sys/kernel/debug/dma_buf/bufinfo",)
RKNPU_MM = ("sys/kernel/debug/rknpu/mm", "proc/rknpu/mm")
_BUFINFO_TOTAL = re.compile(r"Total\s+\d+\s+objects,\s+(\d+)\s+bytes")
_SRAM_USED = re.compile(r"SRAM total size:\s*\d+,\s*used:\s*(\d+)")
_MEMINFO = ("proc/meminfo",)
NPU_LOAD = ("sys/kernel/debug/rknpu/load", "proc/rknpu/load")
_UNITS = {"": 1, "KiB": 1 << 10, "kB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

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


def _drm_bytes(text: str) -> tuple[str | None, int]:
    """(drm-client-id, bytes) of one DRM descriptor's fdinfo: drm-total-* where the driver gives them (they
    include what drm-resident-* and drm-shared-* split), else the older drm-memory-*."""
    client, total, memory = None, 0, 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "drm-client-id":
            client = value.strip()
        elif key.startswith(("drm-total-", "drm-memory-")):
            number, _, unit = value.strip().partition(" ")
            size = int(number) * _UNITS.get(unit.strip(), 1)
            if key.startswith("drm-total-"):
                total += size
            else:
                memory += size
    return client, total or memory


def _fdinfo_bytes(fdinfo: Path) -> tuple[int, int]:
    """(DMA-BUF bytes, DRM driver bytes) among one process's descriptors (an fd closed while read is
    skipped; a DRM client open on several descriptors is counted once)."""
    dmabuf, clients = 0, {}
    try:
        names = os.listdir(fdinfo)
    except OSError:
        return 0, 0          # the process ended between the listing and this read
    for name in names:
        try:
            text = (fdinfo / name).read_text()
        except OSError:
            continue
        if "exp_name:" in text:
            dmabuf += next((int(v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines())
                            if k == "size"), 0)
        elif "drm-client-id:" in text or "drm-driver:" in text:
            client, size = _drm_bytes(text)
            clients[client or name] = size
    return dmabuf, sum(clients.values())


def _smaps_rollup(pid: int) -> dict[str, int]:
    """rss, pss, uss and host (PSS less file-backed) of one process, in bytes, from one read."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh.read().splitlines()[1:]:
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0]) * 1024
    uss = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0) + fields.get("Private_Hugetlb", 0)
    # an older kernel has no Pss_File: the whole PSS, noisier
    return {"rss": fields["Rss"], "pss": fields["Pss"], "uss": uss, "host": fields["Pss"] - fields.get("Pss_File", 0)}


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
    """One reading of every measurable resource of the process tree per call, per process (`last`) and in
    total; which resources are measurable is decided once, at construction (a worker started later is found
    by the relisting)."""

    def __init__(self, root: str | Path = "/", relist_after: float = _RELIST_S):
        self.root = Path(root)
        self.relist_after = relist_after
        self._me = psutil.Process()
        self._children: list[psutil.Process] = []
        self._listed_at = -float("inf")
        self._names: dict[int, str] = {}
        self.not_measured: dict[str, str] = {}
        self.processes = 0              # the most processes one reading summed
        self.last: dict[int, dict[str, int]] = {}       # pid -> the last reading of that process
        self._bufinfo, why = _first_readable(self.root, BUFINFO)
        if self._bufinfo is None:
            self.not_measured["dmabuf_system"] = why
        self._rknpu_mm, why = _first_readable(self.root, RKNPU_MM)
        if self._rknpu_mm is None:
            self.not_measured["npu_sram"] = why
        self._meminfo, why = _first_readable(self.root, _MEMINFO)
        if self._meminfo is None or _cma_in_use(self._read(self._meminfo)) is None:
            self.not_measured["cma"] = why or f"{self._meminfo}: no CmaTotal/CmaFree (a kernel without CMA)"
        self._load, _ = _first_readable(self.root, NPU_LOAD)
        own_fdinfo = self.root / "proc" / str(self._me.pid) / "fdinfo"
        if not os.access(own_fdinfo, os.R_OK | os.X_OK):
            self.not_measured["dmabuf"] = self.not_measured["drm"] = f"{own_fdinfo}: not readable"
        try:
            _smaps_rollup(self._me.pid)
        except (OSError, KeyError, ValueError) as exc:
            for name in ("pss", "uss", "host"):
                self.not_measured[name] = f"/proc/{self._me.pid}/smaps_rollup: {exc}"

    @property
    def measured(self) -> tuple[str, ...]:
        return tuple(r for r in RESOURCES if r not in self.not_measured)

    def name_of(self, pid: int) -> str:
        """'pipeline (pid N)' for this process, 'prefetch worker K (pid N)' for a worker, else its name."""
        if pid not in self._names:
            self._names[pid] = f"{self._describe(pid)} (pid {pid})"
        return self._names[pid]

    def _describe(self, pid: int) -> str:
        if pid == self._me.pid:
            return "pipeline"
        try:
            proc = psutil.Process(pid)
            number = proc.environ().get(WORKER_ENV)
            return f"prefetch worker {number}" if number is not None else proc.name()
        except (psutil.Error, OSError):
            return "a process that ended"

    def npu_load(self) -> str | None:
        """The RKNPU driver's load line ("NPU load:  Core0: 12%, ..."), None where it does not show it."""
        return " ".join(self._read(self._load).split()) or None

    def _tree(self) -> list[psutil.Process]:
        now = time.monotonic()
        if now - self._listed_at >= self.relist_after:
            self._children = self._me.children(recursive=True)
            self._listed_at = now
        return [self._me, *self._children]

    def read(self) -> dict[str, int]:
        """{resource: value} for every measured resource (bytes or a count), summed over the tree; each
        process's own reading in `last`."""
        totals = dict.fromkeys(self.measured, 0)
        tree = self._tree()
        self.processes = max(self.processes, len(tree))
        self.last = {}
        for proc in tree:
            try:
                reading = self._process(proc)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError, ProcessLookupError):
                continue        # ended since the listing: it holds nothing now
            self.last[proc.pid] = reading
            for name, value in reading.items():
                totals[name] += value
        if self._bufinfo is not None:
            match = _BUFINFO_TOTAL.search(self._read(self._bufinfo))
            totals["dmabuf_system"] = int(match.group(1)) if match else 0
        if self._rknpu_mm is not None:
            match = _SRAM_USED.search(self._read(self._rknpu_mm))
            totals["npu_sram"] = int(match.group(1)) if match else 0
        if "cma" in totals:
            totals["cma"] = _cma_in_use(self._read(self._meminfo)) or 0
        return totals

    def _process(self, proc: psutil.Process) -> dict[str, int]:
        reading = _smaps_rollup(proc.pid) if "host" in self.measured else {"rss": proc.memory_info().rss}
        with proc.oneshot():
            reading["fds"] = proc.num_fds()
            reading["threads"] = proc.num_threads()
        if "dmabuf" in self.measured:
            reading["dmabuf"], reading["drm"] = _fdinfo_bytes(self.root / "proc" / str(proc.pid) / "fdinfo")
        return reading

    @staticmethod
    def _read(path: Path | None) -> str:
        try:
            return path.read_text(errors="replace") if path is not None else ""
        except OSError:
            return ""


def _cma_in_use(meminfo: str) -> int | None:
    fields = {}
    for line in meminfo.splitlines():
        key, _, value = line.partition(":")
        if key in ("CmaTotal", "CmaFree"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["CmaTotal"] - fields["CmaFree"] if len(fields) == 2 else None
