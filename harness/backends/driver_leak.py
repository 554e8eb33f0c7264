"""board-sim's driver leak: memory the NPU driver keeps on every release, which no process's RSS shows.

A real RKNPU driver allocates a context's buffers from CMA (or its IOMMU domain) inside the kernel;
a driver that does not free them on release loses memory that only the kernel's figures see: CmaFree
in /proc/meminfo falls while every process of the run looks clean. board-sim models it on a copied
board tree (the suite's --telemetry-root, e.g. a copy of tests/data/sysfs-rk3588), never on "/":

    driver_leak = "64KiB@200"      every release from this process's 200th takes 64 KiB from the
                                   tree's CmaFree (not below 0)
    telemetry_root = "/tmp/board"  the copied tree whose proc/meminfo it writes
"""
from __future__ import annotations

import re
import threading
from pathlib import Path

from ..core.errors import ConfigError
from ..core.sizes import parse_size

__all__ = ["parse_driver_leak", "DriverLeak"]

_SPEC = re.compile(r"([^@]+)@([1-9]\d*)")
_CMA_FREE = re.compile(r"^(CmaFree:\s*)(\d+)( kB)$", re.M)


def parse_driver_leak(spec, root) -> dict | None:
    """{"bytes", "from", "root"} of the options, checked; None without a leak."""
    if spec is None:
        return None
    match = _SPEC.fullmatch(str(spec).strip())
    try:
        nbytes = parse_size(match[1]) if match else 0
    except ConfigError:
        nbytes = 0
    if not match or not 0 < nbytes <= 1 << 30:
        raise ConfigError(f"board-sim option 'driver_leak' {spec!r}: expected SIZE@RELEASE, e.g. 64KiB@200")
    if root is None or Path(root).resolve() == Path("/"):
        raise ConfigError("board-sim option 'driver_leak' writes a copied board tree's proc/meminfo: give "
                          "'telemetry_root' a copy (e.g. of tests/data/sysfs-rk3588), never /")
    meminfo = Path(root) / "proc" / "meminfo"
    if not _CMA_FREE.search(meminfo.read_text() if meminfo.is_file() else ""):
        raise ConfigError(f"board-sim option 'driver_leak': {meminfo} has no 'CmaFree: N kB' line")
    return {"bytes": nbytes, "from": int(match[2]), "root": str(root)}


class DriverLeak:
    """Counts this process's releases; from the leak's first, takes its bytes from the tree's CmaFree."""
    _lock = threading.Lock()
    _releases = [0]

    @classmethod
    def released(cls, leak: dict | None) -> None:
        if leak is None:
            return
        with cls._lock:
            cls._releases[0] += 1
            if cls._releases[0] < leak["from"]:
                return
            meminfo = Path(leak["root"]) / "proc" / "meminfo"
            text = meminfo.read_text()
            found = _CMA_FREE.search(text)
            if found is None:           # checked when the options were parsed: someone rewrote the file
                return
            free = int(found[2])
            left = max(0, free - leak["bytes"] // 1024)
            meminfo.write_text(_CMA_FREE.sub(lambda m: f"{m[1]}{left}{m[3]}", text, count=1))
