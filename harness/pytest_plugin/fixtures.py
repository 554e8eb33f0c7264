"""The fixtures the gate modules use. They arrange; the gate tests assert.

A gate's run is made here, in the test's setup (`case_run`, `memory_run`), so that a run the board could
not finish ends the test as a pytest *error* with its cause, and a test *fails* only when its gate judged:
see docs/gates.md, section 'Infrastructure errors and gate failures'."""
from __future__ import annotations

from pathlib import Path

import pytest

from ..core.errors import HarnessError
from .baselines import results_gate
from .options import SuiteSettings
from .session import CALL_FAILED
from .state import settings_of, state_of

__all__ = ["suite", "gate_runner", "results_gate", "golden_cases", "artifacts", "npu_guard", "runner_of",
           "selected_cases", "npu_memory_guard", "case_run", "memory_run", "judged_run"]


def runner_of(config):
    """One GateRunner per session, shared by the report header and the gate fixtures."""
    state = state_of(config)
    if state.runner is None:
        from ..gates.runner import GateRunner
        state.runner = GateRunner(state.settings)
    return state.runner


def selected_cases(suite: SuiteSettings, thresholds: bool = True):
    """The golden cases the session runs (--cases, --case-limit); thresholds=False also reads a case with
    no bars yet (NaN)."""
    from ..gates.cases import load_cases
    try:
        cases = load_cases(suite.golden_dir / "cases.toml", thresholds=thresholds and not suite.update_goldens)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    chosen = [c for c in cases if suite.cases is None or c.name in suite.cases]
    return chosen[:suite.case_limit] if suite.case_limit else chosen


def npu_memory_guard(suite: SuiteSettings):
    """The memory guard every npu test runs under (a function, so tests can build the same one)."""
    from ..memory.guard import MemoryGuard, read_system_memory
    # The sampler (PSS included) every 0.25 s; the pipeline's checks between invocations read only
    # MemAvailable and swap, at most every 0.1 s: the guard must not cost the step it watches.
    return MemoryGuard(suite.mem_floor, suite.swap_limit, interval=0.25, max_staleness=0.1,
                       check_reader=read_system_memory)


@pytest.fixture(scope="session")
def suite(request) -> SuiteSettings:
    return settings_of(request.config)


@pytest.fixture(scope="session")
def gate_runner(request):
    return runner_of(request.config)


@pytest.fixture(scope="session")
def golden_cases(suite):
    return selected_cases(suite)


@pytest.fixture
def artifacts(suite, request) -> Path:
    """This test's artifact folder; created by the first file written into it, so passing tests
    leave no empty folders behind."""
    return suite.artifacts / request.node.name.replace("/", "_").replace("[", "-").rstrip("]")


@pytest.fixture(autouse=True)
def npu_guard(request, suite):
    """Around every npu test: an armed memory guard (the NPU requirement is checked at call time).

    The guard samples MemAvailable, swap and PSS; the pipeline checks it between subgraph
    invocations, so a trip stops the run there, releases every context and fails the test with the
    numbers. Its samples are written to the test's artifacts whatever happened.
    """
    if request.node.get_closest_marker("npu") is None:
        yield None
        return
    guard = npu_memory_guard(suite)
    with guard:
        yield guard
    out = suite.artifacts / "memory" / f"{request.node.name}.json"
    guard.write_samples(out)
    state_of(request.config).memory_samples.append((request.node.name, out))
    # A test that failed on the trip already said so: a second report would count it twice.
    if guard.tripped and "memory guard tripped" not in request.node.stash.get(CALL_FAILED, ""):
        pytest.fail(f"memory guard tripped: {guard.trip_reason} (samples: {out})", pytrace=False)


def judged_run(request, case, make):
    """make() -> a CaseRun of `case`, in a fixture: the run when a gate can judge it (also a gate's own verdict,
    a NaN or a memory guard trip, which the test reports as its failure); an infrastructure failure (a driver
    error, a missing runtime or node, a partition that does not open) or a run stopped by --npu-timeout (a
    hung NPU call) is raised here, in setup, so pytest reports it as an error with its cause. None, without
    running, when --require-npu is not met: the test's call-time check fails it and nothing runs on the CPU."""
    suite = settings_of(request.config)
    if suite.require_npu and suite.npu_problem:
        return None
    stopped = state_of(request.config).stopped     # a run stopped (a timeout) is not waited for twice
    if case.name in stopped:
        pytest.fail(f"{case.name}: not run again: {stopped[case.name]}", pytrace=False)
    try:
        run = make()
    except pytest.fail.Exception as exc:        # pytest-timeout's, raised inside the stuck call
        if not str(exc).startswith("Timeout"):
            raise
        stopped[case.name] = (f"its run did not end within --npu-timeout {suite.npu_timeout:g} s (a hung NPU call; "
                              f"its report: {suite.artifacts / 'runs' / (case.name + '.json')})")
        pytest.fail(f"{case.name}: {stopped[case.name]}", pytrace=False)
    if run.infrastructure:
        pytest.fail(f"{case.name}: the run failed before any gate could judge it: {run.error} "
                    f"(report: {run.report_path})", pytrace=False)
    return run


@pytest.fixture
def case_run(request, golden_case, gate_runner, npu_guard):
    """The golden case's shared run (numerics, quality), made in setup: see judged_run."""
    return judged_run(request, golden_case, lambda: gate_runner.case_run(golden_case, npu_guard))


@pytest.fixture
def memory_run(request, golden_cases, gate_runner, npu_guard):
    """The run the memory gate measures (gates.runner.memory_case), made in setup: see judged_run."""
    from ..gates.runner import memory_case
    case = memory_case(golden_cases)
    return judged_run(request, case, lambda: gate_runner.case_run(case, npu_guard))
