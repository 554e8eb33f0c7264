"""The benchmark gate's baselines (harness/results/baseline.py) inside pytest.

pytest-benchmark's own --benchmark-autosave/--benchmark-save store every run, failed, INVALID and
pull-request runs included, and its --benchmark-compare-fail judges against the last of them in the
terminal summary (the test stays "passed" in JUnit, and an empty store ends the session with exit 4).
The suite refuses --benchmark-compare-fail and judges by rule instead: the benchmark test compares
against the baseline of the same key and fails itself on a regression; baselines offered by valid runs
are written at session end, only when --save-baseline is given and the whole session passed.
pytest-benchmark's saved runs stay what they are, an archive (written atomically, storage.py) that no
verdict reads.
"""
from __future__ import annotations

import pytest

from ..results.baseline import REGRESSED, WITHIN, BaselineKey, BaselineStore, Comparison, judge
from ..results.provenance import comparable_versions, git_revision, run_id
from .state import BASELINE_OFFERS, BASELINE_OUTCOMES, BENCH_RESULTS, BOARD, IDENTITY, SETTINGS, append_to

__all__ = ["BaselineGate", "baseline_gate", "pytest_configure", "pytest_collection_modifyitems",
           "pytest_sessionfinish", "pytest_terminal_summary", "REFUSED_BENCHMARK_OPTIONS"]

# pytest-benchmark option -> what replaces it
REFUSED_BENCHMARK_OPTIONS = {
    "benchmark_compare_fail": "--baseline-threshold=PERCENT (the benchmark test itself fails, against the "
                              "baseline of its own key; --save-baseline writes baselines)",
}


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    for option, instead in REFUSED_BENCHMARK_OPTIONS.items():
        if getattr(config.option, option, None):
            raise pytest.UsageError(f"--{option.replace('_', '-')} is refused by the suite's baseline rules: "
                                    f"use {instead}")


def pytest_collection_modifyitems(config, items):
    # A hung NPU call (a blocked ioctl in the driver) must fail its own test, with the partial report
    # kept, rather than run into the job's timeout with nothing written.
    seconds = config.stash[SETTINGS].npu_timeout
    if seconds:
        for item in items:
            if item.get_closest_marker("npu") and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(seconds))


class BaselineGate:
    """What test_benchmark.py asks: the key of its run, the comparison, and the offer to save."""

    def __init__(self, config):
        self.config = config
        self.settings = config.stash[SETTINGS]
        self.store = BaselineStore(self.settings.baselines, config.stash[BOARD])

    def key(self, case: str, steps: int, precision: str, manifest_hash: str) -> BaselineKey:
        return BaselineKey(case=case, steps=steps, precision=precision, backend=self.settings.backend,
                           manifest_hash=manifest_hash,
                           versions=comparable_versions(self.config.stash[IDENTITY]))

    def compare(self, key: BaselineKey, mean_s: float) -> Comparison:
        return judge(self.store, key, mean_s, self.settings.baseline_threshold)

    def offer(self, nodeid: str, key: BaselineKey, mean_s: float, telemetry: dict) -> None:
        """Queue this timing as the next baseline; written at session end if the rules allow."""
        if not self.settings.save_baseline:
            return
        if not telemetry["valid"]:
            append_to(self.config, BASELINE_OUTCOMES,
                      (nodeid, None, "baseline not saved: the run is INVALID (" + "; ".join(telemetry["reasons"]) + ")"))
            return
        provenance = {"run_id": run_id(), "git_revision": git_revision(), "test": nodeid}
        append_to(self.config, BASELINE_OFFERS, (nodeid, key, mean_s, provenance))


@pytest.fixture
def baseline_gate(request) -> BaselineGate:
    return BaselineGate(request.config)


@pytest.hookimpl(tryfirst=True)     # before the run summary, which reports what was saved
def pytest_sessionfinish(session, exitstatus):
    offers = session.config.stash.get(BASELINE_OFFERS, [])
    if not offers:
        return
    gate = BaselineGate(session.config)
    passed = exitstatus == 0 and session.testsfailed == 0
    for nodeid, key, mean_s, provenance in offers:
        if passed:
            path = gate.store.save(key, mean_s, provenance)
            append_to(session.config, BASELINE_OUTCOMES, (nodeid, str(path), f"baseline saved: {path}"))
        else:
            append_to(session.config, BASELINE_OUTCOMES,
                      (nodeid, None, f"baseline not saved: the session did not pass "
                                     f"({session.testsfailed} failed, exit status {int(exitstatus)})"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for bench in config.stash.get(BENCH_RESULTS, []):
        c = bench["comparison"]
        terminalreporter.write_line(f"{bench['test']}: {c['message']}",
                                    red=c["status"] == REGRESSED, yellow=c["status"] != WITHIN)
    for nodeid, path, message in config.stash.get(BASELINE_OUTCOMES, []):
        terminalreporter.write_line(f"{nodeid}: {message}", green=path is not None, yellow=path is None)
