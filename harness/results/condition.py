"""The host's condition during a benchmark run: CPU count, load average and a calibration probe, and
whether two runs' conditions are comparable.

A run's times say how fast the stack ran *on this machine as it was then*. When another job takes the
CPUs, every figure slows with nothing changed in the stack, and a history cannot tell that from a slower
stack. So each run records, besides its times:
  - the CPU count (a run on another number of CPUs is another machine);
  - the total memory its kernel reports (psutil: /proc/meminfo's MemTotal; on the board, where the
    session runs under rknnlite, the board's own): an 8 GiB board is not a 16 GiB one, whose page
    cache and CMA leave the NPU's contexts more room (memory_gib says which size a total stands for);
  - the load average per CPU at its start and end (context for the reader: it counts runnable
    threads, the run's own among them, not speed);
  - a calibration probe: a fixed piece of CPU work (SHA-256 over a fixed buffer, one thread, no part
    of the NPU stack or onnxruntime, so a slower stack cannot slow it) timed before and after the run;
    its seconds are the machine's speed index for that run.
The probe is what decides comparability: its own history is judged with the history verdict, both
ways, at the run's confidence. A probe outside its history's prediction interval means the machine
itself ran faster or slower than in the runs the new one would be judged against, and the verdict is
"not comparable", neither a pass nor a regression.
"""
from __future__ import annotations

import hashlib
import math
import os
import statistics
import time
from dataclasses import dataclass

from .verdict.probe import PROBE_LABEL, probe_verdict

__all__ = ["HostCondition", "probe_seconds", "probe_verdict", "condition_line", "PROBE_LABEL", "memory_gib",
           "memory_label"]

_BUFFER = bytes(range(256)) * 1024          # 256 KiB, fixed
_PASSES = 40                                # about 10 ms per repetition on a 2020s x86 core
_REPEATS = 5


def probe_seconds(repeats: int = _REPEATS) -> float:
    """Mean seconds of one repetition of the fixed probe work (the mean, not the median: a run's
    figures are means, and contention that takes a share of the core shows in the mean)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(_PASSES):
            hashlib.sha256(_BUFFER).digest()
        times.append(time.perf_counter() - started)
    return statistics.fmean(times)


def _load_per_cpu(cpus: int) -> float | None:
    try:
        return os.getloadavg()[0] / cpus
    except (OSError, AttributeError):       # no load average on this platform
        return None


def memory_gib(total_bytes: int | None) -> float | None:
    """The memory size a host's reported total stands for, in GiB: the smallest size memory is fitted
    in (2^k and 1.5 x 2^k GiB: ..., 4, 6, 8, 12, 16, 24, 32, ...) at or above it. A kernel reports less
    than is fitted (firmware, its own image and the CMA carve-outs: an 8 GiB RK3588 board reports
    7.6-7.8 GiB), never more, so two boards of one size read alike and an 8 and a 16 GiB board do not.
    None when not recorded."""
    if total_bytes is None:
        return None
    gib = total_bytes / 2 ** 30
    size = 2.0 ** math.ceil(math.log2(gib))
    return 0.75 * size if 0.75 * size >= gib else size


def memory_label(gib: float | None) -> str:
    """'8 GiB' of a memory_gib, or 'memory not recorded'."""
    return "memory not recorded" if gib is None else f"{gib:g} GiB"


@dataclass
class HostCondition:
    """Measures the host's condition around a benchmark run:

        with HostCondition() as host:
            run_benchmark()
        host.cpus, host.memory_bytes, host.load_per_cpu, host.probe_s
    """
    cpus: int = 0
    memory_bytes: int | None = None
    load_per_cpu: float | None = None
    probe_s: float | None = None

    def __enter__(self) -> HostCondition:
        self.cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        import psutil  # here: the verdicts read this module, and only a run measured needs it
        self.memory_bytes = int(psutil.virtual_memory().total)
        self._load = _load_per_cpu(self.cpus)
        self._probe = probe_seconds()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        after = _load_per_cpu(self.cpus)
        loads = [x for x in (self._load, after) if x is not None]
        self.load_per_cpu = max(loads) if loads else None
        self.probe_s = (self._probe + probe_seconds()) / 2


def condition_line(cpus: int | None, load_per_cpu: float | None, probe_s: float | None) -> str:
    """'2 CPUs, load 1.85 per CPU, probe 11.2 ms' (what is known of it)."""
    parts = [f"{cpus} CPUs" if cpus else None,
             f"load {load_per_cpu:.2f} per CPU" if load_per_cpu is not None else None,
             f"probe {1000 * probe_s:.1f} ms" if probe_s is not None else None]
    return ", ".join(p for p in parts if p) or "condition not recorded"
