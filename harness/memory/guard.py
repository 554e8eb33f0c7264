"""Memory-safety guard: abort a run before the board swaps itself to death.

84 resident contexts do not fit in the 7.75 GiB board (see the residency probe in the board
profile: PSS grows ~135 MiB per context and swap starts growing at 8 contexts). Once the board
swaps, a subgraph lifecycle stalls for minutes and the run's timings are worthless, so the gate is
"MemAvailable stays above a floor and system swap does not grow more than a few MiB".

`MemoryGuard` samples memory on a daemon thread (so a spike between subgraph invocations is seen)
and the pipeline calls `check()` between invocations, which is where the abort is raised: a
background thread cannot stop a lifecycle cleanly, the pipeline can (release what it holds, write
its partial record, exit).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from ..core.atomic import atomic_write_json
from ..core.errors import ConfigError, MemoryGuardTripped
from ..core.sizes import parse_size

__all__ = ["read_system_memory", "MemoryReading", "read_memory", "MemoryGuard", "parse_size", "mib"]

log = logging.getLogger(__name__)

MiB = 1 << 20


def mib(n: float) -> float:
    """Bytes -> MiB (2^20), the unit of every figure in the board profile."""
    return n / MiB


@dataclass(frozen=True)
class MemoryReading:
    """One sample. `pss` is the PSS of the run's whole process tree: this process and every process
    it started (prefetch workers, the toolkit simulator's worker), because a context a worker holds
    costs the board as much as one held here. `pss_workers` is the descendants' part of it and
    `workers` how many there were. Where the kernel gives no PSS, USS or RSS stands in (`pss_source`
    says which), so the record never claims a figure it did not measure."""

    t: float              # time.monotonic() seconds
    mem_available: int    # bytes, system-wide MemAvailable
    swap_used: int        # bytes, system-wide
    pss: int              # bytes, this process and its descendants
    pss_source: str = "pss"
    pss_workers: int = 0  # bytes, the descendants alone
    workers: int = 0      # descendant processes read

    @property
    def pss_pipeline(self) -> int:
        """This process's own PSS (the pipeline's)."""
        return self.pss - self.pss_workers


def _footprint(proc: psutil.Process) -> tuple[int, str]:
    try:
        full = proc.memory_full_info()
    except (psutil.AccessDenied, OSError, NotImplementedError):
        full = None
    for source in ("pss", "uss"):
        value = getattr(full, source, None)
        if value is not None:
            return int(value), source
    return int(proc.memory_info().rss), "rss"


# Listing descendants scans every process in /proc (~3-9 ms on the 2-core development machine,
# 120 processes, under load): a sampler ticking several times a second lists them at most twice a
# second and reads the PSS of the ones it knows in between. A run starts its workers (prefetch, the
# simulator's) at its start, so for the first second of a guard every tick lists them afresh: a run
# shorter than the relist interval must not finish before its workers are ever seen.
_RELIST_S = 0.5
_CLOSE_WATCH_S = 1.0
_listing: dict = {"t": -math.inf, "children": [], "close_until": -math.inf}


def watch_closely(seconds: float = _CLOSE_WATCH_S) -> None:
    """List the descendants on every reading for the next `seconds` (a run is starting)."""
    _listing["close_until"] = time.monotonic() + seconds


def _descendants(relist_after: float) -> list[psutil.Process]:
    now = time.monotonic()
    if now < _listing["close_until"] or now - _listing["t"] >= relist_after:
        _listing.update(t=now, children=psutil.Process().children(recursive=True))
    return list(_listing["children"])


def _tree_footprint(relist_after: float = 0.0) -> tuple[int, int, int, str]:
    """(PSS of this process, of its descendants, how many descendants were read, source)."""
    me = psutil.Process()
    own, source = _footprint(me)
    workers = total = 0
    for child in _descendants(relist_after):
        try:
            pss, child_source = _footprint(child)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue            # ended between the listing and the read: it holds nothing now
        total += pss
        workers += 1
        if child_source != source:      # one figure must not mix kinds: say the weakest one
            source = max(source, child_source, key=("pss", "uss", "rss").index)
    return own, total, workers, source


def read_system_memory() -> MemoryReading:
    """MemAvailable and swap only (a /proc/meminfo read, ~50 us): what the trip decision needs.

    The process PSS is left for the sampler thread: reading it walks smaps (~1.7 ms), too dear
    for the check made between every pair of subgraph invocations.
    """
    return MemoryReading(t=time.monotonic(), mem_available=psutil.virtual_memory().available,
                         swap_used=psutil.swap_memory().used, pss=0, pss_source="none")


def read_memory(relist_after: float = 0.0) -> MemoryReading:
    """Read MemAvailable, system swap used and the PSS of this process and its descendants now
    (descendants listed afresh unless listed less than `relist_after` seconds ago)."""
    own, workers_pss, workers, source = _tree_footprint(relist_after)
    return MemoryReading(
        t=time.monotonic(),
        mem_available=int(psutil.virtual_memory().available),
        swap_used=int(psutil.swap_memory().used),
        pss=own + workers_pss,
        pss_source=source,
        pss_workers=workers_pss,
        workers=workers,
    )


def sampled_memory() -> MemoryReading:
    """read_memory for a sampler that ticks several times a second (the guard's default reader)."""
    return read_memory(relist_after=_RELIST_S)


class MemoryGuard:
    """Watch MemAvailable and swap growth while a run holds NPU contexts.

        with MemoryGuard("1.5GiB", "16MiB") as guard:
            for subgraph in ...:
                guard.check()          # raises MemoryGuardTripped once a limit was crossed
                run(subgraph)
        guard.write_samples(run_dir / "memory.json")

    The start is the first reading, taken on entry. A trip is sticky: once seen (by the sampler
    thread or by `check()`), every later `check()` raises, even if memory has recovered, because
    the run has already been disturbed. `on_trip(reason)` is called once, from whichever thread
    saw it first.
    """

    def __init__(self, floor_bytes, swap_limit_bytes, interval: float = 0.05,
                 reader: Callable[[], MemoryReading] = sampled_memory,
                 on_trip: Callable[[str], None] | None = None, max_staleness: float = 0.0,
                 check_reader: Callable[[], MemoryReading] | None = None):
        self.max_staleness = float(max_staleness)
        # check() may use a cheaper reader than the sampler (read_system_memory: no PSS).
        self._check_reader = check_reader
        self.floor_bytes = parse_size(floor_bytes)
        self.swap_limit_bytes = parse_size(swap_limit_bytes)
        if not (isinstance(interval, numbers.Real) and interval > 0):
            raise ConfigError(f"memory guard interval {interval!r}: must be a positive number of seconds")
        self.interval: float = float(interval)
        self._reader: Callable[[], MemoryReading] = reader
        self._on_trip: Callable[[str], None] | None = on_trip
        self._lock: threading.Lock = threading.Lock()
        self._samples: list[MemoryReading] = []
        self._trip_reason: str | None = None
        self._tripped: threading.Event = threading.Event()
        self._stop: threading.Event = threading.Event()
        self._thread: threading.Thread | None = None
        self.sampler_errors: int = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> MemoryGuard:
        if self._thread is not None or self._samples:
            raise RuntimeError("MemoryGuard cannot be entered twice; make a new guard per run")
        self._observe(self._reader())  # the start, taken before any context is loaded
        watch_closely()                # the run's workers start now: see them however short it is
        self._thread = threading.Thread(target=self._sample_loop, name=f"memory-guard-{id(self):x}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _sample_loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._observe(self._reader())
            except Exception:  # any error: the sampler must outlive a bad read
                # A failed read loses one sample; killing the thread would lose the guard.
                self.sampler_errors += 1
                log.exception("memory guard: reading failed")

    # -- observation -----------------------------------------------------------------------------
    def _observe(self, reading: MemoryReading) -> None:
        with self._lock:
            if reading.pss_source == "none" and self._samples:     # carry the last known PSS
                last = self._samples[-1]
                reading = dataclasses.replace(reading, pss=last.pss, pss_source=last.pss_source,
                                              pss_workers=last.pss_workers, workers=last.workers)
            self._samples.append(reading)
            if self._trip_reason is not None:
                return
            reason = self._limit_crossed(reading)
            if reason is None:
                return
            self._trip_reason = reason
        self._tripped.set()
        log.warning("memory guard tripped: %s", reason)
        if self._on_trip is not None:
            try:
                self._on_trip(reason)
            except Exception:  # any error: a broken callback must not hide the trip
                log.exception("memory guard: on_trip callback failed")

    def _limit_crossed(self, reading: MemoryReading) -> str | None:
        reasons = []
        if reading.mem_available < self.floor_bytes:
            reasons.append(f"MemAvailable {mib(reading.mem_available):.1f} MiB below floor "
                           f"{mib(self.floor_bytes):.1f} MiB")
        growth = reading.swap_used - self._samples[0].swap_used
        if growth > self.swap_limit_bytes:
            reasons.append(f"swap growth {mib(growth):.1f} MiB over limit "
                           f"{mib(self.swap_limit_bytes):.1f} MiB "
                           f"(at the start {mib(self._samples[0].swap_used):.1f} MiB)")
        return "; ".join(reasons) or None

    def check(self) -> None:
        """Take a reading now and raise MemoryGuardTripped if any limit has been crossed so far.

        Call between subgraph invocations: the fresh reading catches a drop that happened since
        the sampler's last tick.
        """
        if not self._samples:
            raise RuntimeError("MemoryGuard.check() called before entering the guard (use `with`)")
        # A fresh reading costs ~1.7 ms (PSS walks smaps). A pipeline with thousands of short
        # invocations sets max_staleness (e.g. to the sampler interval) and reuses a sample that
        # recent; the default 0 reads on every check.
        if time.monotonic() - self._samples[-1].t >= self.max_staleness:
            self._observe((self._check_reader or self._reader)())
        if self._trip_reason is not None:
            raise MemoryGuardTripped(f"memory guard tripped: {self._trip_reason}")

    # -- results ---------------------------------------------------------------------------------
    @property
    def tripped(self) -> bool:
        return self._tripped.is_set()

    @property
    def trip_reason(self) -> str | None:
        return self._trip_reason

    def wait_for_trip(self, timeout: float) -> bool:
        """Block until a trip is recorded or `timeout` seconds pass; True if tripped."""
        return self._tripped.wait(timeout)

    @property
    def samples(self) -> list[MemoryReading]:
        with self._lock:
            return list(self._samples)

    @property
    def peak_pss_added(self) -> int:
        """Largest PSS of the process tree above the first reading, in bytes (0 before any growth)."""
        samples = self.samples
        if not samples:
            return 0
        return max(s.pss for s in samples) - samples[0].pss

    def summary(self) -> dict:
        samples = self.samples
        start = samples[0] if samples else None
        # "baseline_*": the start's keys as run reports have always spelled them (reports written
        # before read the same); the start is the first reading, not the results store's baseline
        return {
            "floor_bytes": self.floor_bytes,
            "swap_limit_bytes": self.swap_limit_bytes,
            "interval_s": self.interval,
            "baseline_mem_available_bytes": start.mem_available if start else None,
            "baseline_swap_bytes": start.swap_used if start else None,
            "baseline_pss_bytes": start.pss if start else None,
            "pss_source": start.pss_source if start else None,
            "min_mem_available_bytes": min(s.mem_available for s in samples) if samples else None,
            "max_swap_growth_bytes": (max(s.swap_used for s in samples) - start.swap_used
                                      if start else None),
            "peak_pss_added_bytes": self.peak_pss_added,
            # the workers' part (prefetch workers, the simulator's worker) beside the pipeline's
            "peak_workers_pss_bytes": max(s.pss_workers for s in samples) if samples else None,
            "max_worker_processes": max(s.workers for s in samples) if samples else None,
            "trip_reason": self._trip_reason,
            "sample_count": len(samples),
            "sampler_errors": self.sampler_errors,
        }

    def write_samples(self, path: str | Path) -> None:
        """Write summary + every sample as JSON, atomically; also after a trip (the partial record
        is the evidence of what went wrong)."""
        atomic_write_json(path, {"summary": self.summary(),
                                 "samples": [asdict(s) for s in self.samples]})
