"""The lab store the results site is shown on: three boards of one model, two cases, a stack upgrade
on every board and a +8 % regression of one board on one case, written the way the gate writes runs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from harness.results.store import ResultsStore
from tests.results_data import VERSIONS_NEW, VERSIONS_OLD, make_run

__all__ = ["lab_store", "BOARDS", "CASES", "RUNS", "UPGRADE_AT", "REGRESSION_AT", "SLOW", "INVALID_RUN", "run_name"]

BOARDS = ("rock-5c-aaaa", "rock-5c-bbbb", "rock-5c-cccc")
CASES = ("cat", "dog")
RUNS = 40               # per board and case
UPGRADE_AT = 33         # the first run on the new stack (runtime and toolkit 2.3.2 -> 2.5.0), every board
REGRESSION_AT = 35      # the first run of board cccc's case cat that is 8 % slower (a new git revision)
SLOW = ("rock-5c-cccc", "cat")
INVALID_RUN = ("rock-5c-bbbb", "dog", 15)       # a thermal trip: INVALID, far off
NOISE = 0.0005          # log-normal run-to-run noise: three boards' spread is the fleet's reference


def run_name(board: str, case: str, i: int) -> str:
    return f"{board[-4:]}-{case}-{i:02d}"


def _revision(i: int) -> str:
    """The git revision under test at run i: a new one every 10 runs, and one at the regression."""
    era = sum(i >= start for start in (10, 20, 30, REGRESSION_AT))
    return f"{era:x}{'0' * 39}"[:1] + f"{era * 7 + 0xabc:x}" + "0" * 35


def lab_store(url: str, seed: int = 3, before_write=None) -> None:
    """Write the lab's runs into the store at `url`, interleaved in time; each series' first run saved
    as its baseline. `before_write(store, run)` is called before each run is written."""
    rng = np.random.default_rng(seed)
    with ResultsStore(url) as store:
        for i in range(RUNS):
            for b, board in enumerate(BOARDS):
                for c, case in enumerate(CASES):
                    level = (1.08 if (board, case) == SLOW and i >= REGRESSION_AT else 1.0) * (1.0 + 0.5 * c)
                    invalid = (board, case, i) == INVALID_RUN
                    step = level * (1.25 if invalid else float(np.exp(rng.normal(0, NOISE))))
                    run = make_run(run_name(board, case, i), step, board=board, case=case,
                                   versions=VERSIONS_NEW if i >= UPGRADE_AT else VERSIONS_OLD, valid=not invalid,
                                   minute=60 * i + 6 * b + c)
                    run = replace(run, git_revision=_revision(i),
                                  invalid_reasons=("thermal throttling: 95 C, clocks down",) if invalid else ())
                    if before_write is not None:
                        before_write(store, run)
                    store.add_run(run, baseline="saved" if i == 0 else None)
