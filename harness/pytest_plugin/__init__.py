"""The suite's pytest plugin (`-p harness.pytest_plugin` in pytest.ini), in the parts pytest-benchmark
keeps apart:

    options.py   the options table, board-profile settings and their validation (pytest_addoption)
    hooks.py     configure, report header, test generation, the --require-npu check, summaries
    fixtures.py  what the gate modules ask for: suite, gate_runner, golden_cases, artifacts, npu_guard
    storage.py   pytest-benchmark integration: --benchmark-json written atomically, machine info
    session.py   one run end to end: outputs checked first, artifacts locked, signals, session.json
    state.py     the keys under which the session's state lives in `config.stash`
    baselines.py benchmark runs into the results store (--results), their verdicts, baselines saved at the end
    reporting.py step progress in logs, the markdown summary and the HTML report of each run
    duration.py  the smoke tier first; a board session's expected length from the board profile
    preflight.py the stack preflight before any npu test on the board; a failed one starts none
    caller.py    paths from where bin/test's user stands; the checkout on the tests' subprocesses' PYTHONPATH
    workers.py   under pytest-xdist (-n): the gates run alone, the workers' share of the session to the controller

The gate modules under tests/acceptance stay thin: fixtures arrange, the test asserts one gate.
"""
from .options import OPTIONS, SuiteSettings, resolve_settings
from .state import settings_of

__all__ = ["OPTIONS", "SuiteSettings", "resolve_settings", "settings_of"]

# Each part registers its own hooks and fixtures as a plugin of its own.
pytest_plugins = ["harness.pytest_plugin.options", "harness.pytest_plugin.hooks",
                  "harness.pytest_plugin.fixtures", "harness.pytest_plugin.storage",
                  "harness.pytest_plugin.session", "harness.pytest_plugin.baselines",
                  "harness.pytest_plugin.reporting", "harness.pytest_plugin.duration",
                  "harness.pytest_plugin.preflight", "harness.pytest_plugin.workers",
                  "harness.pytest_plugin.caller"]
