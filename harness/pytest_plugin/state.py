"""The session's state: one typed object in `config.stash` under one key, made at configure time (plugin.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ..core.outputs import ArtifactsLock
    from ..core.signals import StopSignals
    from ..gates.runner import GateRunner
    from ..results.records import Run
    from ..results.store import ResultsStore
    from .options import SuiteSettings

__all__ = ["SessionState", "SessionRun", "STATE", "SHIPPED", "state_of", "settings_of", "is_worker"]


@dataclass
class SessionRun:
    """The run a controller (or a serial session) holds from its start to its end (session.py)."""
    lock: ArtifactsLock
    signals: StopSignals
    started: float = field(default_factory=time.time)


@dataclass
class SessionState:
    settings: SuiteSettings                         # resolved options (options.py)
    identity: dict = field(default_factory=dict)    # board identity read from telemetry
    board: str = ""                                 # board id: benchmark storage and history key
    runner: GateRunner | None = None                # one GateRunner per session (fixtures.runner_of)
    run: SessionRun | None = None                   # the artifacts lock and the signals (session.py)
    store: ResultsStore | None = None               # --results, opened on first use (baselines.py)
    store_failure: str | None = None                # why --results could not be opened when the session started
    room: Path | None = None                        # -n: the controller's folder of the room lock (workers.py)
    preflight_judged: bool = False                  # the stack was judged (preflight.py)
    stopped: dict[str, str] = field(default_factory=dict)   # case -> why its run was stopped (fixtures.py)
    recorded: list[Run] = field(default_factory=list)       # the runs this session judged, written at its end
    written: list[Path] = field(default_factory=list)       # summary.md and report.html, once written
    benchmark_json: list = field(default_factory=list)      # -n: pytest-benchmark's JSON text of each worker
    worker_facts: list = field(default_factory=list)        # -n: each worker's gate-runner facts
    # What the tests and the parts gather for the session's end; an xdist worker ships these (SHIPPED).
    test_outcomes: list = field(default_factory=list)       # per test: nodeid, outcome, seconds, first line
    bench_results: list = field(default_factory=list)       # per benchmark: timing, comparison, validity
    quality_results: list = field(default_factory=list)     # per quality case: SSIM/PSNR, thresholds, images
    memory_samples: list = field(default_factory=list)      # (test name, guard samples file)
    golden_updates: list = field(default_factory=list)      # (case, files written, why) of --update-goldens
    step_splits: list = field(default_factory=list)         # (test name, benchmark info) for the summary
    quality_lines: list = field(default_factory=list)       # quality gate: metrics, thresholds, margins per case
    spectrum_lines: list = field(default_factory=list)      # Spectrum vs full: wall-time ratio lines
    invalid_runs: list = field(default_factory=list)        # (test name, reasons) of INVALID benchmarks
    baseline_outcomes: list = field(default_factory=list)   # (nodeid, saved path or None, message)
    baseline_offers: list = field(default_factory=list)     # (nodeid, run, reason) to save at the end


# The lists a worker sends to the controller (workers.py), in the order they are merged.
SHIPPED = ("test_outcomes", "bench_results", "quality_results", "memory_samples", "golden_updates", "step_splits",
           "quality_lines", "spectrum_lines", "invalid_runs", "baseline_outcomes")
STATE = pytest.StashKey[SessionState]()


def state_of(config) -> SessionState:
    return config.stash[STATE]


def settings_of(config) -> Any:
    return config.stash[STATE].settings


def is_worker(config) -> bool:
    """This process is a pytest-xdist worker (workers.py): the controller writes the session's files."""
    return hasattr(config, "workerinput")
