"""One benchmark run as the results store keeps it, checked when it is made.

A run is one timed benchmark of one golden case in one pytest session on one board. Its key says what it
may be compared with: case, steps, precision and backend (the *experiment*) plus the manifest hash and the
NPU stack's versions (the *stack*). Two runs of the same experiment under different stacks are an upgrade
comparison; two runs of the same key are one history.

Every number is checked here, before any database sees it: finite, non-negative, and the step times and
the denoise time positive (a run of 0 s measured nothing, and would be a division by zero in every
verdict after it). A Run that exists is one the store can hold.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from ..core.errors import HarnessError
from ..lifecycle.steptimes import STAGE_NAMES
from ..model.config import BRANCHES
from ..partition.manifest import FUSED_BRANCH

__all__ = ["ResultsError", "RunKey", "Run", "SubgraphTime", "utc_now", "board_model_of", "STACK_FIELDS"]

# The parts of a key that an NPU stack upgrade (toolkit, runtime, driver) changes.
STACK_FIELDS = ("manifest_hash", "versions")


class ResultsError(HarnessError):
    """A run, the results store or a file read into it is wrong: names the run, store or file."""


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def board_model_of(board_id: str) -> str:
    """The board model of a board id (harness.results.telemetry.board_id: model slug, then the serial's hash):
    the boards of one model are one fleet."""
    return re.sub(r"-[0-9a-f]{8}$", "", board_id) or board_id


def _digest(table: dict) -> str:
    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunKey:
    case: str
    steps: int
    precision: str
    backend: str
    manifest_hash: str
    versions: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    # cached: a key is frozen, and a lab's 10,000 runs asked for these 90,000 times (asdict each time)
    @functools.cached_property
    def digest(self) -> str:
        """The whole key: runs with equal digests are one history."""
        return _digest(self.as_dict())

    @functools.cached_property
    def experiment(self) -> str:
        """The key without the stack: runs with equal experiments differ at most by an upgrade."""
        return _digest({k: v for k, v in self.as_dict().items() if k not in STACK_FIELDS})

    def differences(self, other: RunKey) -> list[str]:
        """'field: other -> this' for every field that differs (versions one by one)."""
        out = [f"{name} {_short(getattr(other, name))} -> {_short(getattr(self, name))}"
               for name in ("case", "steps", "precision", "backend", "manifest_hash")
               if getattr(other, name) != getattr(self, name)]
        for name in sorted(set(other.versions) | set(self.versions)):
            if other.versions.get(name) != self.versions.get(name):
                out.append(f"{name} {other.versions.get(name)} -> {self.versions.get(name)}")
        return out


def _short(value):
    return value[:12] if isinstance(value, str) and len(value) == 64 else value


@dataclass(frozen=True)
class SubgraphTime:
    """Core (run-stage) seconds per step of one subgraph: aggregated, not one row per invocation."""
    subgraph: str
    block: int | None
    branch: str
    seconds_per_step: float


@dataclass(frozen=True)
class Run:
    run_id: str
    key: RunKey
    time: str                       # UTC ISO 8601 with offset
    board_id: str
    board_model: str                # runs of one model make a fleet
    model: str
    valid: bool
    mean_step_s: float
    total_denoise_s: float
    stages: dict = field(default_factory=dict)          # stage -> seconds per step
    branches: dict = field(default_factory=dict)        # branch -> core seconds per step
    step_s: tuple = ()                                  # seconds of each step, in order
    subgraphs: tuple = ()                               # SubgraphTime
    quality: dict = field(default_factory=dict)         # metric -> value (this run's case)
    invalid_reasons: tuple = ()
    git_revision: str | None = None
    ci_url: str | None = None
    kernel: str | None = None
    peak_pss_added_bytes: int | None = None
    # the host's condition during the run (harness/results/condition.py); None where not recorded
    host_cpus: int | None = None
    host_memory_bytes: int | None = None                # the host's total memory as its kernel reports it
    host_load: float | None = None                      # load average per CPU, the higher of start and end
    host_probe_s: float | None = None                   # calibration probe seconds: the machine-speed index
    # the board's serial (hashed: telemetry.serial_hash) where its device tree has one, and the device
    # tree's model string as this run read it: what keeps a renamed board's id (ResultsStore.filed)
    serial_hash: str | None = None
    device_model: str | None = None

    def __post_init__(self):
        where = f"run {self.run_id!r}"
        for name in ("run_id", "board_id", "board_model", "model", "time"):
            _text(getattr(self, name), where, name)
        for name in ("case", "precision", "backend", "manifest_hash"):
            _text(getattr(self.key, name), where, f"key {name}")
        if not isinstance(self.key.steps, int) or isinstance(self.key.steps, bool) or self.key.steps < 1:
            raise ResultsError(f"{where}: key steps must be a positive whole number, got {self.key.steps!r}")
        try:
            when: datetime | None = datetime.fromisoformat(self.time)
        except (ValueError, TypeError):
            when = None
        if when is None or when.utcoffset() is None:
            raise ResultsError(f"{where}: time must be ISO 8601 with a UTC offset, got {self.time!r}")
        # kept in UTC: the store orders runs by this text, which sorts by time only in one offset
        object.__setattr__(self, "time", when.astimezone(UTC).isoformat(timespec="seconds"))
        if not isinstance(self.valid, bool):
            raise ResultsError(f"{where}: valid must be true or false, got {self.valid!r}")
        _seconds(self.mean_step_s, where, "mean_step_s", positive=True)
        _seconds(self.total_denoise_s, where, "total_denoise_s", positive=True)
        _table(self.stages, STAGE_NAMES, where, "stage")
        # a fused partition's subgraphs are all of branch "block" (harness/partition/manifest.py)
        _table(self.branches, BRANCHES + (FUSED_BRANCH,), where, "branch")
        for index, seconds in enumerate(self.step_s):
            _seconds(seconds, where, f"step {index}", positive=True)
        for sub in self.subgraphs:
            _text(sub.subgraph, where, "subgraph")
            _seconds(sub.seconds_per_step, where, f"subgraph {sub.subgraph}")
        for metric, value in self.quality.items():
            _number(value, where, f"quality {metric}")
        if self.peak_pss_added_bytes is not None and (not isinstance(self.peak_pss_added_bytes, int)
                                                      or self.peak_pss_added_bytes < 0):
            raise ResultsError(f"{where}: peak_pss_added_bytes must be bytes >= 0, got {self.peak_pss_added_bytes!r}")
        self._check_host(where)
        if self.serial_hash is not None and not re.fullmatch(r"[0-9a-f]{16}", str(self.serial_hash)):
            raise ResultsError(f"{where}: serial_hash must be 16 lowercase hex digits, got {self.serial_hash!r}")
        if self.device_model is not None:
            _text(self.device_model, where, "device_model")

    def _check_host(self, where: str) -> None:
        if self.host_cpus is not None and (isinstance(self.host_cpus, bool) or not isinstance(self.host_cpus, int)
                                           or self.host_cpus < 1):
            raise ResultsError(f"{where}: host_cpus must be a whole number >= 1, got {self.host_cpus!r}")
        memory = self.host_memory_bytes
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 1):
            raise ResultsError(f"{where}: host_memory_bytes must be a whole number of bytes >= 1, got {memory!r}")
        if self.host_load is not None:
            _seconds(self.host_load, where, "host_load")
        if self.host_probe_s is not None:
            _seconds(self.host_probe_s, where, "host_probe_s", positive=True)

    def label(self) -> str:
        return f"{self.key.case} on {self.board_id} ({self.time}, run {self.run_id})"


def _text(value, where: str, name: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ResultsError(f"{where}: {name} must be a non-empty string, got {value!r}")


def _number(value, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ResultsError(f"{where}: {name} must be a finite number, got {value!r}")
    return float(value)


def _seconds(value, where: str, name: str, positive: bool = False) -> None:
    number = _number(value, where, name)
    if number < 0 or (positive and number == 0):
        raise ResultsError(f"{where}: {name} must be seconds {'> 0' if positive else '>= 0'}, got {value!r}")


def _table(table: dict, names: tuple, where: str, what: str) -> None:
    if not isinstance(table, dict):
        raise ResultsError(f"{where}: {what} times must be a table, got {type(table).__name__}")
    unknown = sorted(set(table) - set(names))
    if unknown:
        raise ResultsError(f"{where}: unknown {what} {unknown[0]!r} (known: {', '.join(names)})")
    for name, seconds in table.items():
        _seconds(seconds, where, f"{what} {name}")
