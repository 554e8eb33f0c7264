"""Strategies whose contexts live in the pipeline's own process: which contexts to keep loaded.

Each is one keep-policy over the same acquire / run / finish / close cycle:
    on-demand   keep nothing: load, init, run every stream, release (the board's choice for Anima);
    resident    keep everything once loaded (84 contexts do not fit the 8 GB board);
    lru:K       keep the K most recently used; under the fixed cyclic order a pool under the
                subgraph count never hits (board profile [spectrum_28] lru_hits = 0 of 1,092);
    pinned:K    keep a chosen subset loaded for the whole run, the rest on demand.
Whatever happens, `close()` releases every context still loaded and never raises.
"""
from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from pathlib import Path

from ..backends.base import BackendOptions, Context
from ..core.timing import Timed
from .records import Counters, LifecycleRecorder
from .split import context_for

__all__ = ["LocalStrategy", "OnDemand", "Resident", "Lru", "Pinned"]


class LocalStrategy:
    """Load on a miss, keep what `keeps()` says, release the rest after its last stream."""

    name = "local"
    capacity: int | None = None         # most contexts kept at once (None: no limit)

    def __init__(self, options: BackendOptions, recorder: LifecycleRecorder, path_of):
        self.options = options
        self.recorder = recorder
        self._path_of = path_of         # entry -> absolute subgraph file path
        self._paths: dict[int, Path] = {}
        self._loaded: OrderedDict[int, tuple] = OrderedDict()     # index -> (entry, context)
        self.counters = Counters()
        self.final_release_s = 0.0

    # -- policy -----------------------------------------------------------------------------
    def keeps(self, entry) -> bool:
        return False

    # -- the cycle the pipeline drives --------------------------------------------------------
    def acquire(self, entry, step: int) -> Context:
        held = self._loaded.get(entry.index)
        if held is not None:
            self.counters.hits += 1
            self._loaded.move_to_end(entry.index)
            return held[1]
        self.counters.misses += 1
        while self.capacity is not None and len(self._loaded) >= self.capacity:
            old_index = next(iter(self._loaded))       # least recently used first
            self._release(old_index, step)
        with self._timed(step, entry, "load"):
            # Making the runtime object is part of loading (RKNNLite() then load_rknn on the board).
            ctx = context_for(self.options, entry.label, self.path_of(entry))
            self._loaded[entry.index] = (entry, ctx)
            self.counters.loaded()
            ctx.load(self.path_of(entry))
        with self._timed(step, entry, "init"):
            ctx.init()
        return ctx

    def path_of(self, entry) -> Path:
        # Resolving (symlink checks) costs more than a small subgraph's inference: once per file.
        if entry.index not in self._paths:
            self._paths[entry.index] = Path(self._path_of(entry))
        return self._paths[entry.index]

    def run(self, ctx: Context, entry, step: int, inputs: list) -> list:
        with self.recorder.timed(step, entry, "run"):
            return ctx.run(inputs)

    def finish(self, entry, step: int) -> None:
        if entry.index in self._loaded and not self.keeps(entry):
            self._release(entry.index, step)

    def close(self) -> None:
        """Release everything still loaded (end of run, error, abort); never raises."""
        start = time.perf_counter()
        while self._loaded:
            _, (_, ctx) = self._loaded.popitem()
            self.counters.released()
            with contextlib.suppress(Exception):
                ctx.release()
        self.final_release_s += time.perf_counter() - start

    def stats(self) -> dict:
        return {"strategy": self.name, **self.counters.as_dict(), "final_release_s": self.final_release_s}

    # -- helpers ------------------------------------------------------------------------------
    def _release(self, index: int, step: int) -> None:
        entry, ctx = self._loaded.pop(index)
        self.counters.released()
        with self._timed(step, entry, "release"):
            ctx.release()

    def _timed(self, step: int, entry, stage: str) -> Timed:
        return Timed(self._record, (step, entry, stage))

    def _record(self, key: tuple, seconds: float) -> None:
        step, entry, stage = key
        self.recorder.add(step, entry, stage, seconds)
        # In the pipeline's own thread, every lifecycle second is waited for.
        self.counters.lifecycle_s += seconds
        self.counters.waited_s += seconds


class OnDemand(LocalStrategy):
    """Load a subgraph's context just before use and release it right after."""

    name = "on-demand"


class Resident(LocalStrategy):
    """Keep every context once loaded: the upper bound of what keeping can save."""

    name = "resident"

    def keeps(self, entry) -> bool:
        return True


class Lru(LocalStrategy):
    """Keep at most K contexts; on a miss with the pool full, release the least recently used."""

    def __init__(self, options: BackendOptions, recorder, path_of, k: int):
        super().__init__(options, recorder, path_of)
        self.capacity = k
        self.name = f"lru:{k}"

    def keeps(self, entry) -> bool:
        return True


class Pinned(LocalStrategy):
    """Keep the chosen subgraphs (by index) loaded for the whole run; the rest on demand."""

    def __init__(self, options: BackendOptions, recorder, path_of, pinned: frozenset[int], name: str):
        super().__init__(options, recorder, path_of)
        self.pinned = frozenset(pinned)
        self.name = name

    def keeps(self, entry) -> bool:
        return entry.index in self.pinned
