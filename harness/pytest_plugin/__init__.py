"""The suite's pytest plugin (`-p harness.pytest_plugin` in pytest.ini). plugin.py is the session, read top
to bottom: each pytest hook the suite implements, once, calling the parts in order. The parts, in the
pieces pytest-benchmark keeps apart:

    plugin.py    the session in order: every hook, and why each step takes its place
    state.py     the session's state: one SessionState in `config.stash`
    options.py   the options table, board-profile settings and their validation
    hooks.py     settings at configure time, report header, test generation, the --require-npu check, summaries
    fixtures.py  what the gate modules ask for: suite, gate_runner, golden_cases, artifacts, npu_guard
    storage.py   pytest-benchmark integration: --benchmark-json written atomically, machine info
    session.py   one run end to end: outputs checked first, artifacts locked, signals, session.json
    baselines.py benchmark runs into the results store (--results), their verdicts, baselines saved at the end
    reporting.py step progress in logs, the markdown summary and the HTML report of each run
    duration.py  the smoke tier first; a board session's expected length from the board profile
    preflight.py the stack preflight before any npu test on the board; a failed one starts none
    caller.py    paths from where bin/test's user stands; the checkout on the tests' subprocesses' PYTHONPATH
    workers.py   under pytest-xdist (-n): the gates run alone, the workers' share of the session to the controller

The gate modules under tests/acceptance stay thin: fixtures arrange, the test asserts one gate.
"""
from .options import OPTIONS, SuiteSettings, resolve_settings
from .state import SessionState, settings_of, state_of

__all__ = ["OPTIONS", "SuiteSettings", "SessionState", "resolve_settings", "settings_of", "state_of"]

# The hooks (plugin.py) and the fixtures the gate modules ask for (fixtures.py): the parts are plain modules.
pytest_plugins = ["harness.pytest_plugin.plugin", "harness.pytest_plugin.fixtures"]
