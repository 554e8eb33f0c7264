"""The suite's pytest session, top to bottom: every pytest hook the suite implements is here, once, and
calls the parts (options, hooks, session, workers, storage, baselines, reporting, duration, preflight) in
the order written. The parts keep their logic as plain functions and keep nothing in `config.stash` but
the one SessionState (state.py).

Where a step sits among pytest's own hooks and the other plugins' (pytest-benchmark, pytest-xdist, timeout)
is pluggy's rule: this plugin is registered before the installed plugins (`-p harness.pytest_plugin` in
pytest.ini), later-registered implementations run first, tryfirst ones before the others, trylast ones
after, and wrappers around all of them. Each hook says why it takes its place.
"""
from __future__ import annotations

import pytest

from . import baselines, caller, duration, hooks, options, preflight, reporting, storage, workers
from . import session as suite_run
from .state import STATE


def pytest_addoption(parser):
    options.addoption(parser)       # the options table (harness/cli/options.py), and --board-profile


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(args):
    # Before pytest parses its arguments (and before the other plugins' turn): the caller's paths made
    # absolute, the checkout on the PYTHONPATH the tests' subprocesses inherit.
    caller.load_initial_conftests(args)


# -- configure: first of every plugin's configure -------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Settings first: every step after reads them. Then -n (workers.choose, inside): xdist's own configure,
    # trylast, reads the -n it decides. Outputs checked and the JUnit path set before junitxml's configure
    # reads it. The board identity last: the header and the benchmark machine info read it.
    hooks.configure(config)
    preflight.configure(config)     # the `preflight` marker, before collection checks --strict-markers
    # pytest-benchmark's own storage refused before pytest-benchmark's configure opens it
    baselines.configure(config)
    reporting.configure(config)     # step progress lines: the gate runner exists from here on


# -- the session starts ---------------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    # A -m that cannot select what was meant, refused in one line: after every plugin's configure has
    # registered its markers, before xdist starts its workers (its sessionstart, trylast) and before the
    # artifacts are touched.
    hooks.check_marker_expression(session.config)
    # The artifacts folder locked and cleared and the signals armed before anything writes into it
    # (junitxml's start, a worker's first report).
    suite_run.sessionstart(session)
    workers.sessionstart(session)   # a worker: no longer marked a worker for the runs its tests start
    storage.sessionstart(session)   # --benchmark-json written atomically, or shipped by a worker


def pytest_report_header(config):
    return hooks.report_header(config)


# -- -n: the controller's side of pytest-xdist ----------------------------------------------------------
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    workers.configure_node(node)    # each worker is told where the room lock is


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    # before xdist's own (trylast): the tests that run alone, one work unit on one worker
    return workers.make_scheduler(config, log)


# -- collection -----------------------------------------------------------------------------------------
def pytest_generate_tests(metafunc):
    hooks.generate_tests(metafunc)  # one gate test per golden case


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session, config, items):
    # Before pytest's --deselect, -k and -m (and the other plugins'): what the suite adds to every
    # collected test, and its own deselection, counted on what was collected.
    baselines.collection_modifyitems(config, items)     # --npu-timeout on every npu test
    storage.collection_modifyitems(config, items)       # --suite-run: benchmark.json when a benchmark is collected
    hooks.collection_modifyitems(config, items)         # board checks off the board, A/B without --ab-a
    result = yield
    # After them, on the tests the session keeps: the order they run in.
    duration.collection_modifyitems(items)              # the smoke tier first, its stack preflight before all
    workers.collection_modifyitems(config, items)       # a worker: the tests that run alone first, their ids written
    return result


def pytest_collection_finish(session):
    duration.collection_finish(session)     # a board session's expected length, before its first test
    baselines.collection_finish(session)    # the results store opened before a benchmark spends its time


# -- each test ------------------------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield from workers.runtest_protocol(item, nextitem)    # -n: the room, shared or alone, around the whole test


def pytest_runtest_logstart(nodeid, location):
    suite_run.runtest_logstart(nodeid)      # a stop names the test it stopped


def pytest_runtest_setup(item):
    preflight.runtest_setup(item)   # a bad stack fails the first npu test's setup, and nothing runs after it
    suite_run.runtest_setup(item)   # session.json names the npu test running, for a run that is killed


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    hooks.pyfunc_call(pyfuncitem)   # --require-npu off the board fails the npu test before its body runs


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    suite_run.runtest_makereport(item, call, report)    # how the body failed, for the memory guard's fixture
    reporting.runtest_makereport(item, report)          # one outcome per test for the summary
    preflight.runtest_makereport(item, report)          # a failed stack preflight stops the session
    return report


# -- pytest-benchmark -----------------------------------------------------------------------------------
def pytest_benchmark_update_machine_info(config, machine_info):
    storage.update_machine_info(config, machine_info)  # the board's identity beside pytest-benchmark's


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    storage.compare_machine_info(config, benchmarksession, machine_info, compared_benchmark)


# -- the session ends -----------------------------------------------------------------------------------
@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    workers.testnodedown(node, error)   # the controller: each worker's share merged as the worker ends


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    # Around every other sessionfinish: inside are pytest-benchmark's (which summarises and writes
    # benchmark.json), xdist's on a worker (which sends workeroutput as it leaves), the terminal
    # reporter's (the summary, as it leaves) and junitxml's.
    suite_run.before_finish(session)    # a benchmark stopped mid-round marked, before pytest-benchmark reads it
    try:
        baselines.sessionfinish(session, exitstatus)    # the runs and baselines written, before anything reports them
        reporting.sessionfinish(session, exitstatus)    # summary.md and report.html, with what was saved
        workers.sessionfinish(session)      # a worker: its share into workeroutput, with the baselines' lines
        storage.sessionfinish(session)      # a process that timed no benchmark writes no benchmark.json
        return (yield)
    finally:
        suite_run.sessionfinish(session)    # session.json last, whatever happened inside: how the run ended


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    reporting.terminal_summary(terminalreporter, exitstatus, config)    # golden updates, where the summary is
    baselines.terminal_summary(terminalreporter, exitstatus, config)    # verdicts, baselines saved or refused
    hooks.terminal_summary(terminalreporter, exitstatus, config)        # step splits, quality, Spectrum, INVALID


def pytest_unconfigure(config):
    state = config.stash.get(STATE, None)
    if state is None:
        return                      # configure stopped before the settings were resolved
    workers.unconfigure(state)      # the room lock's folder removed
    baselines.unconfigure(state)    # the results store closed
    suite_run.unconfigure(state)    # signals restored and the artifacts lock released last
