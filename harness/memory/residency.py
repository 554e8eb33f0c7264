"""The residency probe: load contexts one at a time and keep them, measuring what each one costs,
until a memory gate trips or a limit is reached; then release them all (timed), fit the growth and
extrapolate to every subgraph.

This is how the board's [[residency_probe]] table was made (boards/data/rock5c-anima.toml): PSS
grows ~135 MiB per Anima context and swap starts growing at 8, which is why the suite runs the 84
subgraphs on demand. The gates are the memory guard's (MemAvailable floor, swap growth) and,
optionally, a budget of added PSS: a process-local figure that other work on a shared machine does
not move.

An init the runtime refuses after earlier ones passed (rknn_init failing past some number of live
contexts: the 4 GiB IOMMU domain, airockchip/rknn-toolkit2#287; the faults backend's init-fails-after=N)
is the board's measured context ceiling: the probe stops there and reports N and the memory then,
and `harness plan --residency probe.json` caps every strategy's live contexts at it.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..backends.base import BackendOptions, create_context, live_contexts
from ..core.errors import BackendError, MemoryGuardTripped
from .guard import MemoryGuard, read_memory

__all__ = ["residency_probe", "growth_per_context", "extrapolate", "ceiling_line", "INIT_FAILED"]

INIT_FAILED = "init failed"     # how a backend's error names a refused init (Context.error)

MiB = 2 ** 20


@dataclass
class ProbeRow:
    contexts: int
    pss_mib: float
    pss_added_mib: float
    mem_available_delta_mib: float
    swap_growth_mib: float


@dataclass
class ProbeResult:
    rows: list[ProbeRow]
    tripped: str | None
    release_seconds: float
    live_after: int = 0
    mem_available_start_mib: float = 0.0
    ceiling: dict | None = None     # {"contexts", "error", "pss_added_mib", "mem_available_delta_mib"}

    def as_dict(self) -> dict:
        return {"rows": [asdict(r) for r in self.rows], "tripped": self.tripped,
                "release_seconds": self.release_seconds, "live_after": self.live_after,
                "mem_available_start_mib": self.mem_available_start_mib, "ceiling": self.ceiling}


def ceiling_line(ceiling: dict) -> str:
    return (f"context ceiling: rknn_init failed after {ceiling['contexts']} contexts (PSS added "
            f"{ceiling['pss_added_mib']:.1f} MiB, MemAvailable {ceiling['mem_available_delta_mib']:+.1f} MiB): "
            f"{ceiling['error']}")


def residency_probe(options: BackendOptions, manifest, guard: MemoryGuard, limit: int,
                    budget_bytes: int | None = None, on_row=None, warm_up: bool = False) -> ProbeResult:
    """Hold up to `limit` contexts (cycling through the manifest's subgraphs) under `guard`, and
    stop once the PSS added over the start exceeds `budget_bytes` (if given).

    warm_up: load and release one context before the start (the first reading), so the runtime's one-off start-up
    (onnxruntime's environment: ~20 MiB here) is not billed to the first context.
    """
    if warm_up:
        _warm_up(options, manifest)
    base = read_memory()
    held, rows, tripped, ceiling = [], [], None, None
    entries = manifest.subgraphs
    try:
        for n in range(limit):
            guard.check()
            entry = entries[n % len(entries)]
            ctx = create_context(options, f"{entry.label} copy {n // len(entries)}")
            held.append(ctx)
            ctx.load(manifest.path_of(entry))
            ctx.init()
            now = read_memory()
            rows.append(ProbeRow(n + 1, now.pss / MiB, (now.pss - base.pss) / MiB,
                                 (now.mem_available - base.mem_available) / MiB,
                                 (now.swap_used - base.swap_used) / MiB))
            if on_row is not None:
                on_row(rows[-1])
            if budget_bytes is not None and now.pss - base.pss > budget_bytes:
                raise MemoryGuardTripped(f"PSS added {rows[-1].pss_added_mib:.1f} MiB over the budget "
                                         f"{budget_bytes / MiB:.1f} MiB at {n + 1} contexts")
        guard.check()
    except MemoryGuardTripped as exc:
        tripped = str(exc)
    except BackendError as exc:
        if INIT_FAILED not in str(exc) or not rows:
            raise
        last = rows[-1]
        ceiling = {"contexts": last.contexts, "error": str(exc), "pss_added_mib": last.pss_added_mib,
                   "mem_available_delta_mib": last.mem_available_delta_mib}
        tripped = ceiling_line(ceiling)
    finally:
        start = time.perf_counter()
        for ctx in held:            # one failed release must not leave the others loaded
            with contextlib.suppress(Exception):
                ctx.release()
        release_seconds = time.perf_counter() - start
    return ProbeResult(rows, tripped, release_seconds, live_contexts(), base.mem_available / MiB, ceiling)


def _warm_up(options: BackendOptions, manifest) -> None:
    entry = manifest.subgraphs[0]
    ctx = create_context(options, f"{entry.label} warm-up")
    try:
        ctx.load(manifest.path_of(entry))
        ctx.init()
    finally:
        ctx.release()


def growth_per_context(contexts, pss_added_mib, fit_rows: int = 2) -> float:
    """MiB per context: a least-squares line through the last `fit_rows` rows (the marginal growth
    where the runtime's one-off first-context cost no longer dilutes it)."""
    c = np.asarray(contexts, dtype=float)[-fit_rows:]
    p = np.asarray(pss_added_mib, dtype=float)[-fit_rows:]
    if len(c) < 2:
        return float(p[-1] / c[-1]) if len(c) else 0.0
    return float(np.polyfit(c, p, 1)[0])


def extrapolate(contexts, pss_added_mib, target: float, fit_rows: int = 2) -> float:
    """Added PSS (MiB) at `target` contexts: the last row plus the fitted growth per context."""
    slope = growth_per_context(contexts, pss_added_mib, fit_rows)
    return float(pss_added_mib[-1] + (target - contexts[-1]) * slope)
