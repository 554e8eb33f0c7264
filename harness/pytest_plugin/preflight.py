"""The stack preflight before any npu test on the board (harness/gates/preflight.py).

The smoke tier's first test (marker `preflight`, sorted first by duration.py) judges the stack; when it
fails on the board, no test after it starts: the session stops as `-x` stops it (exit 1), since every npu
test on a known-bad stack would only fail the same way, slowly, or crash the runtime. A board session that did not
select that test (`-k quality`) gets the same check before its first npu test, as that test's setup: a
bad stack is then an error of the board, not a gate's verdict, and again nothing after it starts.
"""
from __future__ import annotations

import pytest

from .state import state_of

MARKER = "preflight"


def configure(config):
    config.addinivalue_line("markers", f"{MARKER}: the stack preflight (versions against "
                                       "toolkit/compatibility.toml); a failure starts no test after it")


def _stop(session, line: str) -> None:
    session.shouldfail = f"{line}: no test after it started"


def runtest_makereport(item, report):
    if item.get_closest_marker(MARKER) is None:
        return
    state = state_of(item.config)
    state.preflight_judged = True
    settings = state.settings
    # Off the board under --require-npu it fails without a stack to judge: the checks after it each say what
    # is missing there, so they still run.
    if report.failed and not (settings.require_npu and settings.npu_problem):
        _stop(item.session, "stack preflight failed")


def runtest_setup(item):
    """The first npu test on the board's runtime, when the preflight test has not judged the stack yet."""
    state = state_of(item.config)
    settings = state.settings
    if (state.preflight_judged or settings.backend != "rknnlite" or item.get_closest_marker(MARKER)
            or item.get_closest_marker("npu") is None):
        return
    state.preflight_judged = True
    from ..gates.preflight import preflight
    verdict = preflight(settings.partition, settings.telemetry_root)
    if verdict.kind == "bad":
        _stop(item.session, "stack preflight failed")
        pytest.fail(verdict.line, pytrace=False)
