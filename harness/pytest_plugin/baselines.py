"""The benchmark gate's results inside pytest: every benchmark run goes to the results store (--results),
is judged against its reference there (harness/results/verdict/), and may become its board's baseline.

pytest-benchmark only times the rounds. Its own storage (--benchmark-autosave, --benchmark-save) and its
--benchmark-compare-fail are refused: they would keep a second store beside the results store and judge
mean against mean with no noise estimate. A run is judged when its benchmark test ends and written at
session end, once the quality gate has measured its image: the run, its quality metrics and (when it
becomes one) its baseline in one transaction, so a session killed at any moment leaves the whole run
or none of it. Baselines come from valid runs only, and only when the whole session passed: with
--save-baseline, or with --accept-upgrade after an upgrade comparison (a new NPU stack or manifest)
that passed.

The store is opened when the session has collected a benchmark test, before any test runs: a bad
--results stops the session there (its reports still written), not after a 40-minute benchmark. A run
the store cannot take at the end (the server went away) is kept in the spool (--results-spool, a
SQLite store) and the line says how `bin/harness results push` sends it.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from ..core.errors import HarnessError
from ..results.records import Run, RunKey, board_model_of, utc_now
from ..results.sessions import ABRecord, ab_record, subgraph_times
from ..results.store import ResultsStore, StoreUnavailable, describe_url
from .state import settings_of, state_of

if TYPE_CHECKING:
    from ..results.verdict.verdict import Verdict

__all__ = ["results_gate"]

# The verdict's modules (results.verdict, gates.benchmark: scipy and onnx, ~2 s of start-up) are imported
# where a benchmark is judged: every pytest process loads this plugin, and most judge nothing.

_INSTEAD = "the results store (--results URL), which every benchmark run is written to"
# pytest-benchmark option -> what replaces it
REFUSED_BENCHMARK_OPTIONS = {
    "benchmark_compare_fail": "--fixed-threshold=PERCENT (the benchmark test itself fails on a verdict "
                              "against the history of its own key; --save-baseline saves baselines)",
    "benchmark_autosave": _INSTEAD,
    "benchmark_save": _INSTEAD,
}


def configure(config):
    for option, instead in REFUSED_BENCHMARK_OPTIONS.items():
        if getattr(config.option, option, None):
            raise pytest.UsageError(f"--{option.replace('_', '-')} is refused by the suite's baseline rules: "
                                    f"use {instead}")


def collection_modifyitems(config, items):
    # A hung NPU call (a blocked ioctl in the driver) must fail its own test, with the partial report
    # kept, rather than run into the job's timeout with nothing written.
    seconds = settings_of(config).npu_timeout
    if seconds:
        for item in items:
            if item.get_closest_marker("npu") and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(seconds))


def collection_finish(session):
    """Open the store once the session is known to run a benchmark, before any test runs: a store
    that cannot be opened (no server, a schema newer than this checkout) fails the session here, its
    reports written, instead of after the benchmark has spent its time."""
    config = session.config
    if config.option.collectonly or not any("results_gate" in getattr(item, "fixturenames", ())
                                            for item in session.items):
        return
    try:
        _store(config)
    except HarnessError as exc:
        state_of(config).store_failure = str(exc)
        state_of(config).baseline_outcomes.append(("--results", None, f"no test run: {exc}"))
        raise session.Failed(f"--results: {exc}") from None


def _store(config) -> ResultsStore:
    """The session's store, opened on first use (a session without benchmarks never opens it)."""
    state = state_of(config)
    if state.store is None:
        state.store = ResultsStore(state.settings.results)
    return state.store


class ResultsGate:
    """The session's side of the store that the benchmark gate's decision (harness/gates/benchmark.py)
    uses: its run as the store keeps it, the verdict, the write, the offer."""

    def __init__(self, config):
        self.config = config
        self.settings = settings_of(config)

    @property
    def store(self) -> ResultsStore:
        return _store(self.config)

    def run_of(self, case: str, info: dict, report: dict, telemetry: dict, precision: str,
               manifest_hash: str, model: str, host=None) -> Run:
        """The run as the store keeps it; `host` (a finished condition.HostCondition) is the host's
        condition during the timed rounds. Filed under its board's id in the store (a board whose
        device-tree model string changed keeps its own: ResultsStore.filed)."""
        from ..results.provenance import ci_url, comparable_versions, git_revision, run_id
        from ..results.telemetry import serial_hash
        identity, board = state_of(self.config).identity, state_of(self.config).board
        run = Run(
            run_id=run_id(), time=utc_now(), board_id=board, board_model=board_model_of(board), model=model,
            key=RunKey(case=case, steps=info["steps"], precision=precision, backend=self.settings.backend,
                       manifest_hash=manifest_hash, versions=comparable_versions(identity)),
            valid=telemetry["valid"], invalid_reasons=tuple(telemetry["reasons"]),
            mean_step_s=info["mean_step_s"], total_denoise_s=info["denoise_s"],
            stages=dict(info["lifecycle_s_per_step"]), branches=dict(info["core_s_per_step"]),
            step_s=tuple(report["step_seconds"]), subgraphs=subgraph_times([report]),
            git_revision=git_revision(), ci_url=ci_url(), kernel=identity.get("kernel"),
            peak_pss_added_bytes=info["peak_pss_added_bytes"],
            host_cpus=host.cpus if host else None, host_memory_bytes=host.memory_bytes if host else None,
            host_load=host.load_per_cpu if host else None,
            host_probe_s=host.probe_s if host else None, serial_hash=serial_hash(identity),
            device_model=identity.get("model"))
        # filing reads the store: a server gone here keeps the measured run for the session's end
        # (add_run files it then, or the spool keeps it) like a verdict that could not be read
        with self._kept_if_unread(run):
            return self.store.filed(run)

    def record_ab(self, session, case: str, telemetry: dict) -> ABRecord:
        """Write the interleaved A/B session `session` (both sides, the pairs, the verdicts, how it ran:
        its ABRequest) now, in one transaction: it has no quality metrics to wait for."""
        record = ab_record(session, case=case, identity=state_of(self.config).identity,
                           board=state_of(self.config).board, telemetry=telemetry)
        try:
            self.store.add_ab_session(record)
        except StoreUnavailable as exc:     # the session's minutes are kept, as a run's are
            raise StoreUnavailable(f"{exc}; {_spool(self.config, lambda spool: spool.add_ab_session(record))}") \
                from None
        return record

    def judge(self, run: Run) -> Verdict:
        from ..results.verdict.judging import judge_run
        with self._kept_if_unread(run):
            return judge_run(self.store, run, self.settings.fixed_threshold, self.settings.detect)

    def confirm(self, run: Run, judgement: Verdict, second: Run) -> Verdict:
        """`judgement` of `run` with a second run's (verdict.confirm; Verdict.regressed says whether
        the regression stands)."""
        from ..results.verdict.judging import confirm
        with self._kept_if_unread(run, second):
            return confirm(self.store, run, judgement, second, self.settings.fixed_threshold,
                           self.settings.detect)

    @contextlib.contextmanager
    def _kept_if_unread(self, *measured: Run):
        """A store lost while the verdict reads it: the runs measured are still kept for the session's
        end (written then, or spooled), and the error says so."""
        try:
            yield
        except StoreUnavailable as exc:
            for run in measured:
                self.record(run)
            raise StoreUnavailable(f"{exc}; the run is kept for the session's end (written then, or kept in the "
                                   f"spool {self.settings.results_spool}, which `bin/harness results push` sends)") \
                from None

    def record(self, run: Run) -> None:
        """Keep the judged run for the session's end (pytest_sessionfinish writes it)."""
        state_of(self.config).recorded.append(run)

    def offer(self, nodeid: str, run: Run, judgement: Verdict) -> None:
        """Queue this run as its board's next baseline when the rules (gates.benchmark.baseline_offer)
        allow; written at session end if the whole session passed."""
        from ..gates.benchmark import baseline_offer
        reason, refused = baseline_offer(run, judgement, self.settings.save_baseline, self.settings.accept_upgrade)
        if refused:
            state_of(self.config).baseline_outcomes.append((nodeid, None, refused))
        elif reason:
            state_of(self.config).baseline_offers.append((nodeid, run, reason))


@pytest.fixture
def results_gate(request) -> ResultsGate:
    return ResultsGate(request.config)


def _quality_of(config, run: Run) -> dict:
    """SSIM and PSNR of the run's case, when the quality gate judged the run's image (PSNR of identical
    images is infinite: a store holds finite numbers only, so it is left out)."""
    for q in state_of(config).quality_results:
        if q["case"] == run.key.case:
            return {f"{q['kind']}_{m}": q[m] for m in ("ssim", "psnr") if math.isfinite(q[m])}
    return {}


def _baseline_reason(session, exitstatus, offer: tuple | None) -> str | None:
    """Why the run offered as `offer` (nodeid, reason) becomes its board's baseline now, or None."""
    if offer is None:
        return None
    if exitstatus == 0 and session.testsfailed == 0:
        return offer[1]
    state_of(session.config).baseline_outcomes.append(
              (offer[0], None, f"baseline not saved: the session did not pass "
                               f"({session.testsfailed} failed, exit status {int(exitstatus)})"))
    return None


def _write_runs(session, exitstatus) -> None:
    """Every judged run with its quality metrics and baseline, one transaction each. A run not
    written fails the session (its benchmark test had passed)."""
    config = session.config
    offers = {(run.run_id, run.key.case): (nodeid, reason)
              for nodeid, run, reason in state_of(config).baseline_offers}
    for run in state_of(config).recorded:
        offer = offers.get((run.run_id, run.key.case))
        reason = _baseline_reason(session, exitstatus, offer)
        nodeid = offer[0] if offer else run.key.case
        whole = replace(run, quality={**run.quality, **_quality_of(config, run)})
        try:
            store = _store(config)
            store.add_run(whole, baseline=reason)
        except StoreUnavailable as exc:
            kept = _spool(config, lambda spool, whole=whole, reason=reason: spool.add_run(whole, baseline=reason))
            state_of(config).baseline_outcomes.append((nodeid, None, f"benchmark run not written: {exc}; {kept}"))
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            continue
        except HarnessError as exc:
            state_of(config).baseline_outcomes.append((nodeid, None, f"benchmark run not written: {exc}"))
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            continue
        if reason is not None:
            state_of(config).baseline_outcomes.append(
                      (nodeid, store.where, f"baseline {reason}: run {run.run_id} in {store.where}"))


def _spool(config, write) -> str:
    """Keep what the store could not take (`write(spool store)`: a run with its baseline, an A/B
    session) in the spool store; what to say."""
    settings = settings_of(config)
    spool = f"sqlite:///{settings.results_spool}"
    try:
        with ResultsStore(spool) as store:
            write(store)
    except HarnessError as exc:
        return f"not kept in the spool either ({exc})"
    return (f"kept in the spool {settings.results_spool}: `bin/harness results push --results {spool} "
            f"--to {describe_url(settings.results)}` sends it")


def sessionfinish(session, exitstatus):
    _write_runs(session, exitstatus)


def unconfigure(state) -> None:
    if state.store is not None:
        state.store.close()


def terminal_summary(terminalreporter, exitstatus, config):
    benches = state_of(config).bench_results
    if benches:
        _write_comparisons(terminalreporter, benches)
    for nodeid, path, message in state_of(config).baseline_outcomes:
        terminalreporter.write_line(f"{nodeid}: {message}", green=path is not None, yellow=path is None)


def _write_comparisons(terminalreporter, benches: list) -> None:
    from ..results.verdict.verdict import FIRST, NOT_COMPARABLE
    for bench in benches:
        c = bench["comparison"]
        terminalreporter.write_line(f"{bench['test']}: {c['message']}",
                                    red=c["status"] == "regressed",
                                    yellow=c["status"] in (FIRST, NOT_COMPARABLE) or c["outcome"] == "inconclusive")
