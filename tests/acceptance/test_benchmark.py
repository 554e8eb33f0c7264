"""Gate: denoise time against the results store (--results): the run's step, branch and stage times are
judged against its reference there (harness/results/verdict/): the history of its key, or after an NPU
stack upgrade the runs of the board's accepted stack (an upgrade comparison on every run until accepted). A
regression fails this test itself, naming the branch or stage, its shift, interval and threshold, so JUnit and CI's test
view show it. A regression judged from one run is confirmed first: the case runs once more (not timed by
pytest-benchmark, measured as the round was) and the test fails only when that run regresses too
(judge.confirm).

pytest-benchmark's stats are the step times, one round a step (storage.step_stats): `pytest-benchmark
compare` on the JSON compares the denoise step; the rounds' durations are extra_info's round_s.
extra_info holds the board profile's tables for the run: mean step time, core time per branch per
step, lifecycle time per stage per step, and the step split (lifecycle / host math / rest). A run during
which a clock moved or a thermal zone reached a trip point is flagged INVALID and never becomes a
baseline. Only the denoise is timed: the partition is verified and the report written outside the rounds.
With `--bench-sampler spectrum` the rounds run the 13-of-28 Spectrum preset; extra_info then counts
computed and forecast steps apart (time per computed step and per image).

It also asserts what makes the figures it hands over trustworthy: every invocation of every computed
step was recorded, the step split adds up without double counting. The run is written to the store at session
end, with the quality gate's metrics of its image, in one transaction. The decision itself is
harness/gates/benchmark.py; this test times the rounds and reports the decision to pytest (extra_info, JUnit
properties, the summary).
"""
import warnings

import pytest

from harness.core.errors import HarnessError
from harness.gates.benchmark import as_run, comparison_of, decide, failure, figure_problems, measured_again
from harness.gates.runner import benchmark_info, derived_case
from harness.pytest_plugin.state import state_of
from harness.pytest_plugin.storage import step_stats
from harness.results.condition import HostCondition
from harness.results.telemetry import TelemetryWindow
from harness.sampling.spectrum import DEFAULT_PRESET, PRESETS

pytestmark = [pytest.mark.npu, pytest.mark.benchmark]


def test_denoise_time(benchmark, golden_cases, gate_runner, npu_guard, suite, results_gate, request,
                      record_property):
    case = golden_cases[0]
    if suite.bench_sampler and suite.bench_sampler != case.sampler:     # --bench-sampler spectrum
        spectrum = PRESETS[DEFAULT_PRESET].as_dict() if suite.bench_sampler == "spectrum" else None
        case = derived_case(case, suite.bench_sampler, sampler=suite.bench_sampler, spectrum=spectrum)
    results = []
    try:        # the suite's own errors (weights, manifest, a guard trip) are one line, not a traceback
        gate_runner.prepare()
        with TelemetryWindow(suite.telemetry_root) as window, HostCondition() as host:
            benchmark.pedantic(lambda: results.append(gate_runner.run(case, npu_guard, suite.bench_steps, keep=False)),
                               rounds=suite.bench_rounds, iterations=1, warmup_rounds=0)
        step_stats(benchmark, [s for result in results for s in result.report["step_seconds"]])
        gate_runner.keep(results[-1], f"{case.name}+bench")
        # The round rendered the case in full with the guard armed: numerics, quality and memory judge it.
        gate_runner.share(case, results[-1], suite.bench_steps)
    except HarnessError as exc:
        benchmark.has_error = True      # no timings to save or compare
        pytest.fail(f"{case.name}: no benchmark: {exc}", pytrace=False)
    try:
        record_run(benchmark, case, gate_runner, window, results[-1], suite, request, results_gate,
                   record_property, host, again=lambda: measured_again(results_gate, case, gate_runner, npu_guard,
                                                                       suite.telemetry_root, suite.bench_steps))
    except (HarnessError, OSError) as exc:
        pytest.fail(f"{case.name}: benchmark ran but was not judged: {exc}", pytrace=False)


def record_run(benchmark, case, gate_runner, window, result, suite, request, results_gate, record_property,
               host, *, again):
    """The gate's decision (harness/gates/benchmark.py) told to pytest, then the verdict."""
    verdict = window.verdict()
    info = benchmark_info(result.report)
    config = request.config
    decision = decide(results_gate, as_run(results_gate, case, gate_runner, result, verdict, info, host), again)
    run, judgement = decision.run, decision.judgement
    comparison = comparison_of(run, judgement)
    benchmark.extra_info.update(info, valid=verdict["valid"], invalid_reasons=verdict["reasons"],
                                board_id=state_of(config).board, verdict=judgement.as_dict(), key=run.key.as_dict())
    record_property("baseline", judgement.kind)
    record_property("baseline_delta_pct", comparison["delta_pct"])
    if not verdict["valid"]:
        state_of(config).invalid_runs.append((request.node.name, verdict["reasons"]))
    state_of(config).step_splits.append((request.node.name, info))
    state_of(config).bench_results.append({"test": request.node.nodeid, "case": case.name, "info": info,
                                           "valid": verdict["valid"], "reasons": verdict["reasons"],
                                           "memory": result.report.get("memory"),
                                           "lifecycle": result.report.get("lifecycle"),
                                           "comparison": comparison, "key": run.key.as_dict()})
    # written at session end with its quality metrics (harness/pytest_plugin/baselines.py)
    decision.keep(results_gate)
    problems = figure_problems(info, suite.bench_steps or case.steps, gate_runner.subgraphs)
    assert not problems, f"the benchmark's figures do not add up: {'; '.join(problems)}"
    # a baseline from the run that was not disturbed
    results_gate.offer(request.node.nodeid, decision.offered, judgement)
    failed, warned = failure(judgement, suite.inconclusive)
    if warned:
        warnings.warn(warned, stacklevel=1)
    if failed:
        pytest.fail(failed, pytrace=False)
