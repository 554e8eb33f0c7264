"""What every strategy records: one `StageRecord` per stage of every invocation, and `Counters`.

A `StageRecord` is (step, subgraph, block, branch, stage, seconds): the JSON report, the tables and
the benchmarks are all derived from these records. `Counters` say what a strategy did with its
contexts (hits, misses, loads, releases, peak live contexts) and, for strategies that load in the
background, how much lifecycle time the pipeline did not wait for.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from ..core.timing import Timed
from .steptimes import BOARD_CALLS

__all__ = ["StageRecord", "LifecycleRecorder", "Counters", "STAGES"]

STAGES = BOARD_CALLS      # stage name -> the board call it times; defined once in steptimes.py


@dataclass(frozen=True)
class StageRecord:
    step: int
    subgraph: int
    block: int
    branch: str
    stage: str
    seconds: float


RECORD_FIELDS = tuple(f.name for f in fields(StageRecord))


@dataclass
class LifecycleRecorder:
    raw: list[tuple] = field(default_factory=list)

    def timed(self, step: int, entry, stage: str) -> Timed:
        return Timed(self._append, (step, entry.index, entry.block, entry.branch, stage))

    def add(self, step: int, entry, stage: str, seconds: float) -> None:
        """A stage timed elsewhere (in a worker process)."""
        self.raw.append((step, entry.index, entry.block, entry.branch, stage, seconds))

    def _append(self, key: tuple, seconds: float) -> None:
        self.raw.append((*key, seconds))

    @property
    def records(self) -> list[StageRecord]:
        return [StageRecord(*r) for r in self.raw]

    def as_dicts(self) -> list[dict]:
        # From the raw tuples: dataclasses.asdict deep-copies each record, ~10x slower over a run's
        # thousands (84 subgraphs x 4 stages x every step), and the report is built after every run.
        return [dict(zip(RECORD_FIELDS, r)) for r in self.raw]


@dataclass
class Counters:
    """hits: acquires served by a context already loaded (kept, or loaded ahead); misses: acquires
    that had to load first. lifecycle_s: load+init+release seconds spent; waited_s: the part of it
    the pipeline stood still for (all of it, for strategies that load in the pipeline's thread)."""

    hits: int = 0
    misses: int = 0
    loads: int = 0
    releases: int = 0
    live: int = 0
    peak_live: int = 0
    lifecycle_s: float = 0.0
    waited_s: float = 0.0

    def loaded(self) -> None:
        self.loads += 1
        self.live += 1
        self.peak_live = max(self.peak_live, self.live)

    def released(self) -> None:
        self.releases += 1
        self.live -= 1

    def as_dict(self) -> dict:
        hidden = max(self.lifecycle_s - self.waited_s, 0.0)
        return {**asdict(self), "hidden_s": hidden,
                "overlap": hidden / self.lifecycle_s if self.lifecycle_s > 0 else 0.0}
