"""Session state kept in `config.stash` (pytest's typed per-config store), one key per thing."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..gates.runner import GateRunner
    from .options import SuiteSettings

__all__ = ["SETTINGS", "IDENTITY", "BOARD", "RUNNER", "STEP_SPLITS", "INVALID_RUNS", "BASELINE_OFFERS",
           "BASELINE_OUTCOMES", "BENCH_RESULTS", "QUALITY_RESULTS", "TEST_OUTCOMES", "MEMORY_SAMPLES",
           "GOLDEN_UPDATES", "SPECTRUM_LINES", "QUALITY_LINES", "STORE_FAILURE", "WORKER_FACTS",
           "settings_of", "append_to", "is_worker"]

SETTINGS: pytest.StashKey[SuiteSettings] = pytest.StashKey()     # resolved options (options.py)
IDENTITY = pytest.StashKey[dict]()                  # board identity read from telemetry
BOARD = pytest.StashKey[str]()                      # board id: benchmark storage and history key
RUNNER: pytest.StashKey[GateRunner] = pytest.StashKey()          # one GateRunner per session
STEP_SPLITS = pytest.StashKey[list]()               # (test name, benchmark info) for the summary
INVALID_RUNS = pytest.StashKey[list]()              # (test name, reasons) of INVALID benchmarks
BASELINE_OFFERS = pytest.StashKey[list]()           # (nodeid, key, mean s, provenance) to save at the end
BASELINE_OUTCOMES = pytest.StashKey[list]()         # (nodeid, saved path or None, message)
BENCH_RESULTS = pytest.StashKey[list]()             # per benchmark: timing, comparison, validity
QUALITY_RESULTS = pytest.StashKey[list]()           # per quality case: SSIM/PSNR, thresholds, images
TEST_OUTCOMES = pytest.StashKey[list]()             # (nodeid, outcome, seconds, first line of the failure)
MEMORY_SAMPLES = pytest.StashKey[list]()            # (test name, guard samples file)
GOLDEN_UPDATES = pytest.StashKey[list]()            # (case, files written, why) of --update-goldens
SPECTRUM_LINES = pytest.StashKey[list]()            # Spectrum vs full: wall-time ratio lines
QUALITY_LINES = pytest.StashKey[list]()             # quality gate: metrics, thresholds, margins per case
WORKER_FACTS = pytest.StashKey[list]()              # -n: each worker's gate-runner facts (reporting.runner_facts)
STORE_FAILURE = pytest.StashKey[str]()              # why --results could not be opened when the session started


def is_worker(config) -> bool:
    """This process is a pytest-xdist worker (workers.py): the controller writes the session's files."""
    return hasattr(config, "workerinput")


def settings_of(config):
    return config.stash[SETTINGS]


def append_to(config, key, item) -> None:
    """Append to a list kept under `key`, creating it on first use."""
    config.stash.setdefault(key, []).append(item)
