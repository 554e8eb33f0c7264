"""Session state kept in `config.stash` (pytest's typed per-config store), one key per thing."""
from __future__ import annotations

import pytest

__all__ = ["SETTINGS", "IDENTITY", "BOARD", "RUNNER", "STEP_SPLITS", "INVALID_RUNS", "SPECTRUM_LINES",
           "QUALITY_LINES", "settings_of", "append_to"]

SETTINGS = pytest.StashKey["SuiteSettings"]()       # resolved options (options.py)
IDENTITY = pytest.StashKey[dict]()                  # board identity read from telemetry
BOARD = pytest.StashKey[str]()                      # board id: benchmark storage and history key
RUNNER = pytest.StashKey["GateRunner"]()            # one GateRunner per session
STEP_SPLITS = pytest.StashKey[list]()               # (test name, benchmark info) for the summary
INVALID_RUNS = pytest.StashKey[list]()              # (test name, reasons) of INVALID benchmarks
SPECTRUM_LINES = pytest.StashKey[list]()            # Spectrum vs full: wall-time ratio lines
QUALITY_LINES = pytest.StashKey[list]()             # quality gate: metrics, thresholds, margins per case


def settings_of(config):
    return config.stash[SETTINGS]


def append_to(config, key, item) -> None:
    """Append to a list kept under `key`, creating it on first use."""
    config.stash.setdefault(key, []).append(item)
