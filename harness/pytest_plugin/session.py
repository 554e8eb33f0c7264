"""One suite run from start to end: its outputs checked before any test spends time, its artifacts
folder held and cleared, SIGINT/SIGTERM/SIGHUP/SIGQUIT turned into an orderly stop, and `session.json` in the
artifacts saying how the run ended (ok, failed, interrupted, terminated) whatever happened."""
from __future__ import annotations

import os
import sys
import time

import pytest

from ..core.atomic import atomic_write_json, sweep_temporaries
from ..core.errors import HarnessError, Terminated
from ..core.outputs import ArtifactsLock, check_free_space, check_writable
from ..core.signals import StopSignals
from ..model.config import REPO_ROOT
from ..results.provenance import run_id
from .state import SessionRun, is_worker, settings_of, state_of

__all__ = ["start_run", "CALL_FAILED"]

SESSION_REPORT = "session.json"
CALL_FAILED = pytest.StashKey[str]()        # on an item: how its test body failed
_current: dict = {}                         # the session's run, for hooks that get no config


def start_run(config, settings) -> None:
    """At configure time, before collection: outputs writable with room to spare, and JUnit XML
    into the artifacts for bin/test. Raises HarnessError naming the option and the path."""
    from ..results.store import check_url
    check_url(settings.results)     # a URL, a database the suite knows, its driver installed: before anything runs
    for option, folder in (("--artifacts", settings.artifacts), *_results_folder(settings)):
        check_writable(folder, option)
        check_free_space(folder, settings.min_free, option)
    _check_golden_dir(settings.golden_dir, explicit=settings.golden_dir_given)
    if settings.suite_run and not getattr(config.option, "xmlpath", None):
        config.option.xmlpath = str(settings.artifacts / "junit.xml")


def _results_folder(settings) -> list[tuple[str, object]]:
    """('--results', folder) of a SQLite results store: it must have room for the run (a fleet's
    PostgreSQL server has its own disk)."""
    from ..results.store import sqlite_path
    path = sqlite_path(settings.results)
    return [("--results", path.parent)] if path else []


def _check_golden_dir(golden_dir, explicit: bool) -> None:
    """A named golden folder must hold a valid cases.toml: say so once, before collection, instead
    of one collection error per gate module."""
    from ..core.errors import ConfigError
    from ..gates.cases import load_cases
    if not (golden_dir / "cases.toml").exists() and not explicit:
        return      # the model has no goldens here: only the gates that need them will say so
    try:
        load_cases(golden_dir / "cases.toml", thresholds=False)     # the gates' fixture asks for them
    except ConfigError as exc:
        raise ConfigError(f"--golden-dir={golden_dir}: {exc}") from None


def sessionstart(session):
    """The artifacts folder ours and empty, leftovers of killed writers swept, signals armed. Not at
    configure time: `pytest --help` must not clear a folder. An xdist worker writes into the folder its
    controller holds, and leaves stops and session.json to it."""
    config = session.config
    settings = settings_of(config)
    # A run id per session, not per process: a pytest run inside a test (pytester, in process) is a
    # session of its own, and its runs must not collide with the runs of the session before it.
    run_id.cache_clear()
    if is_worker(config):
        return
    try:
        lock = ArtifactsLock(settings.artifacts, default=REPO_ROOT / "artifacts").claim()
        try:
            lock.clear_previous()
        except HarnessError:
            lock.release()
            raise
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    sweep_temporaries(settings.golden_dir)
    state_of(config).run = _current["run"] = SessionRun(lock, StopSignals("the test session").__enter__())
    _write_running(config, _current["run"], None)


def _write_running(config, run, test: str | None) -> None:
    settings = settings_of(config)
    try:
        atomic_write_json(settings.artifacts / SESSION_REPORT,
                          {"status": "running", "pid": os.getpid(), "test": test, "argv": sys.argv[1:],
                           "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(run.started))})
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None


def runtest_logstart(nodeid):
    # A stop names the test it stopped ("SIGTERM received during tests/...::test_x").
    run = _current.get("run")
    if run is not None:
        run.signals.where = nodeid


def runtest_setup(item):
    # session.json says "running" and which npu test while one runs: a run killed with SIGKILL
    # (which nothing can catch) leaves that, not a report claiming to have ended.
    run = state_of(item.config).run
    if run is not None and item.get_closest_marker("npu") is not None:
        try:
            _write_running(item.config, run, item.nodeid)
        except pytest.UsageError:
            pass        # the final session.json write says so, and fails the run


def runtest_makereport(item, call, report):
    if call.when == "call" and report.failed:
        item.stash[CALL_FAILED] = str(report.longrepr)


def _drop_unfinished_benchmarks(config) -> None:
    """A benchmark stopped mid-round has no timings: pytest-benchmark would crash summarising it."""
    bench = getattr(config, "_benchmarksession", None)
    for metadata in getattr(bench, "benchmarks", []):
        if not metadata:            # Metadata is false while its Stats hold no round
            metadata.fixture.has_error = True


def before_finish(session) -> None:
    """Before pytest-benchmark's own sessionfinish, which summarises the benchmarks."""
    config = session.config
    if state_of(config).run is not None or is_worker(config):
        _drop_unfinished_benchmarks(config)


def sessionfinish(session) -> None:
    """How the run ended, into session.json, once every other part of the session's end has run."""
    config = session.config
    run = state_of(config).run
    if run is None:
        return
    settings = settings_of(config)
    stopped = run.signals.exception
    if stopped is None and session.exitstatus == pytest.ExitCode.INTERRUPTED:
        stopped = KeyboardInterrupt        # pytest.exit() or a Ctrl-C before the handlers were armed
    if isinstance(stopped, type) and issubclass(stopped, Terminated):    # SIGTERM, SIGHUP, SIGQUIT
        session.exitstatus = stopped.exit_code
    if settings.suite_run and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        print("error: no tests were collected: a run that tested nothing must not pass", file=sys.stderr)
        session.exitstatus = 1
    status = "interrupted" if stopped is KeyboardInterrupt else getattr(stopped, "status", None)
    status = status or ("ok" if session.exitstatus == 0 else "failed")
    try:
        _write_session_report(config, settings, run, status, int(session.exitstatus))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        session.exitstatus = session.exitstatus or 1


def _write_session_report(config, settings, run, status: str, exit_code: int) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats = getattr(reporter, "stats", {}) if reporter else {}
    counts = {k: len(v) for k, v in stats.items() if k in ("passed", "failed", "error", "skipped")}
    runs = settings.artifacts / "runs"
    report = {
        "status": status, "exit_code": exit_code, "pid": os.getpid(), "argv": sys.argv[1:],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(run.started)),
        "seconds": round(time.time() - run.started, 3), "tests": counts,
        "run_reports": sorted(p.name for p in runs.glob("*.json")) if runs.is_dir() else [],
        "failed": [r.nodeid for r in stats.get("failed", []) + stats.get("error", []) if hasattr(r, "nodeid")],
    }
    failure = state_of(config).store_failure
    if failure is not None:       # the session stopped before its tests: say why
        report["error"] = failure
    atomic_write_json(settings.artifacts / SESSION_REPORT, report)


def unconfigure(state) -> None:
    run = state.run
    if run is not None:
        run.signals.restore()
        run.lock.release()
        _current.pop("run", None)
