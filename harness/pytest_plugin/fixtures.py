"""The fixtures the gate modules use. They arrange; the gate tests assert."""
from __future__ import annotations

from pathlib import Path

import pytest

from ..core.errors import HarnessError
from .options import SuiteSettings
from .session import CALL_FAILED
from .state import MEMORY_SAMPLES, RUNNER, SETTINGS, append_to

__all__ = ["suite", "gate_runner", "golden_cases", "artifacts", "npu_guard", "runner_of",
           "selected_cases", "npu_memory_guard"]


def runner_of(config):
    """One GateRunner per session, shared by the report header and the gate fixtures."""
    if RUNNER not in config.stash:
        from ..gates.runner import GateRunner
        config.stash[RUNNER] = GateRunner(config.stash[SETTINGS])
    return config.stash[RUNNER]


def selected_cases(suite: SuiteSettings):
    from ..gates.cases import load_cases
    try:
        cases = load_cases(suite.golden_dir / "cases.toml", thresholds=not suite.update_goldens)
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
    return request.config.stash[SETTINGS]


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
    append_to(request.config, MEMORY_SAMPLES, (request.node.name, out))
    # A test that failed on the trip already said so: a second report would count it twice.
    if guard.tripped and "memory guard tripped" not in request.node.stash.get(CALL_FAILED, ""):
        pytest.fail(f"memory guard tripped: {guard.trip_reason} (samples: {out})", pytrace=False)
