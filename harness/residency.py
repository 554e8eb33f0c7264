"""The residency probe: load contexts one at a time and keep them, measuring what each one costs,
until the memory guard trips or a limit is reached; then release them all (timed).

This is how the board's [[residency_probe]] table was made (board-profile-rock5c-anima.toml): PSS
grows ~135 MiB per Anima context and swap starts growing at 8, which is why the suite runs the 84
subgraphs on demand. Run here it proves the guard stops a run that holds real memory.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from .backends.base import create_context
from .errors import MemoryGuardTripped
from .memory import MemoryGuard, read_memory

__all__ = ["ProbeRow", "ProbeResult", "residency_probe"]


@dataclass
class ProbeRow:
    contexts: int
    pss_added_mib: float
    mem_available_delta_mib: float
    swap_growth_mib: float


@dataclass
class ProbeResult:
    rows: list[ProbeRow]
    tripped: str | None
    release_seconds: float


def residency_probe(backend: str, manifest, guard: MemoryGuard, limit: int, **options) -> ProbeResult:
    """Hold up to `limit` contexts (cycling through the manifest's subgraphs) under `guard`."""
    base = read_memory()
    held, rows, tripped = [], [], None
    entries = manifest.subgraphs
    try:
        for n in range(limit):
            guard.check()
            entry = entries[n % len(entries)]
            ctx = create_context(backend, f"{entry.label} copy {n // len(entries)}", **options)
            held.append(ctx)
            ctx.load(manifest.path_of(entry))
            ctx.init()
            now = read_memory()
            rows.append(ProbeRow(n + 1, (now.pss - base.pss) / 2**20,
                                 (now.mem_available - base.mem_available) / 2**20,
                                 (now.swap_used - base.swap_used) / 2**20))
        guard.check()
    except MemoryGuardTripped as exc:
        tripped = str(exc)
    finally:
        start = time.perf_counter()
        for ctx in held:            # one failed release must not leave the others loaded
            with contextlib.suppress(Exception):
                ctx.release()
        release_seconds = time.perf_counter() - start
    return ProbeResult(rows, tripped, release_seconds)
