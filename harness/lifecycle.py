"""Context lifecycle on a backend, timed stage by stage: load -> init -> run* -> release.

Every stage of every invocation becomes one `StageRecord` (step, subgraph, block, branch, stage,
seconds): the JSON report, the tables and the benchmarks are all derived from these records.

`OnDemand` is the board's strategy for Anima: a subgraph is loaded, initialised, run for every
stream and released before the next one, because 84 resident contexts do not fit in 8 GB.
Whatever happens, `close()` releases every context still loaded.
"""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .backends.base import Context, create_context
from .steptimes import BOARD_CALLS
from .timing import Timed

__all__ = ["StageRecord", "LifecycleRecorder", "OnDemand", "STAGES"]

STAGES = BOARD_CALLS      # stage name -> the board call it times; defined once in steptimes.py


@dataclass(frozen=True)
class StageRecord:
    step: int
    subgraph: int
    block: int
    branch: str
    stage: str
    seconds: float


@dataclass
class LifecycleRecorder:
    raw: list[tuple] = field(default_factory=list)

    def timed(self, step: int, entry, stage: str) -> Timed:
        return Timed(self._append, (step, entry.index, entry.block, entry.branch, stage))

    def _append(self, key: tuple, seconds: float) -> None:
        self.raw.append((*key, seconds))

    @property
    def records(self) -> list[StageRecord]:
        return [StageRecord(*r) for r in self.raw]

    def as_dicts(self) -> list[dict]:
        return [asdict(r) for r in self.records]


class OnDemand:
    """Load a subgraph's context just before use and release it right after."""

    name = "on-demand"

    def __init__(self, backend: str, recorder: LifecycleRecorder, path_of, **backend_options):
        self.backend = backend
        self.recorder = recorder
        self._path_of = path_of         # entry -> absolute model file path
        self._paths: dict[int, Path] = {}
        self.options = backend_options
        self._loaded: dict[int, Context] = {}

    def acquire(self, entry, step: int) -> Context:
        with self.recorder.timed(step, entry, "load"):
            # Making the runtime object is part of loading (RKNNLite() then load_rknn on the board).
            ctx = create_context(self.backend, entry.label, **self.options)
            self._loaded[entry.index] = ctx
            ctx.load(self.path_of(entry))
        with self.recorder.timed(step, entry, "init"):
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
        ctx = self._loaded.pop(entry.index)
        with self.recorder.timed(step, entry, "release"):
            ctx.release()

    def close(self) -> None:
        """Release everything still loaded (after an error or an abort); never raises."""
        while self._loaded:
            _, ctx = self._loaded.popitem()
            with contextlib.suppress(Exception):
                ctx.release()

