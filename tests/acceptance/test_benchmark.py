"""Gate: denoise time, tracked per board by pytest-benchmark (`--benchmark-compare` fails regressions).

extra_info holds the board profile's tables for the run: mean step time, core time per branch per
step, lifecycle time per stage per step, and the step split (lifecycle / host math / rest). A run during
which a clock moved or a thermal zone reached a trip point is flagged INVALID, not silently compared.
Only the denoise is timed: the partition is verified and the report written outside the rounds.
"""
import pytest

from harness.gates import benchmark_info, history_record
from harness.history import append_run
from harness.pytest_plugin.state import BOARD, IDENTITY, INVALID_RUNS, STEP_SPLITS, append_to
from harness.telemetry import TelemetryWindow

pytestmark = [pytest.mark.npu, pytest.mark.benchmark]


def test_denoise_time(benchmark, golden_cases, gate_runner, npu_guard, suite, request):
    case = golden_cases[0]
    gate_runner.prepare()
    results = []
    with TelemetryWindow(suite.telemetry_root) as window:
        benchmark.pedantic(lambda: results.append(gate_runner.run(case, npu_guard, suite.bench_steps, keep=False)),
                           rounds=suite.bench_rounds, iterations=1, warmup_rounds=0)
    gate_runner.keep(results[-1], f"{case.name}-bench")
    verdict = window.verdict()
    info = benchmark_info(results[-1].report)
    benchmark.extra_info.update(info, valid=verdict["valid"], invalid_reasons=verdict["reasons"],
                                board_id=request.config.stash[BOARD])
    if not verdict["valid"]:
        append_to(request.config, INVALID_RUNS, (request.node.name, verdict["reasons"]))
    append_to(request.config, STEP_SPLITS, (request.node.name, info))
    append_run(suite.history, history_record(info, request.config.stash[IDENTITY], request.config.stash[BOARD],
                                             suite.backend, gate_runner.bundle.cfg.name,
                                             gate_runner.manifest_hash, verdict))
