"""pytest-benchmark integration: its stats are the step times (step_stats), --benchmark-json written
atomically, and the board identity in its machine info. pytest-benchmark keeps no runs of its own:
they go to the results store (baselines.py refuses its --benchmark-save/--benchmark-autosave)."""
from __future__ import annotations

from .state import settings_of, state_of


def step_stats(benchmark, step_seconds: list[float]) -> None:
    """pytest-benchmark's stats become the denoise step times, one round a step (every round's steps in
    order), so `pytest-benchmark compare` on the suite's JSON compares the figure every verdict judges,
    not a whole round's duration (one to a few rounds: stddev 0, and the round's set-up in it). The
    rounds' durations stay in extra_info (round_s) beside the step's own figures."""
    metadata = getattr(benchmark, "stats", None)
    if metadata is None or not step_seconds:
        return          # --benchmark-disable: no stats; no steps: the round's duration is all there is
    from pytest_benchmark.stats import Stats
    rounds = list(metadata.stats.data)
    steps = Stats()
    for seconds in step_seconds:
        steps.update(seconds)
    metadata.stats = steps
    benchmark.extra_info.update(round_s=rounds, stats_are="denoise step seconds, one round a step")


def sessionstart(session):
    bench = getattr(session.config, "_benchmarksession", None)
    if bench is None:
        return          # pytest-benchmark not active (-p no:benchmark): nothing is saved
    atomic_json(bench)


def atomic_json(bench) -> None:
    """--benchmark-json written atomically (pytest-benchmark writes it with a plain open/write)."""
    from pytest_benchmark.utils import safe_dumps

    from ..core.atomic import atomic_write_bytes
    from .workers import ship_benchmark_json

    def save_json(output_json):
        text = safe_dumps(output_json, ensure_ascii=True, indent=4)
        if ship_benchmark_json(bench.config, bench.json, text):
            return          # an xdist worker's: the controller writes the session's one file
        atomic_write_bytes(bench.json, text.encode())
        bench.logger.info(f"Wrote benchmark data in: {bench.json}", purple=True)

    bench.save_json = save_json


def collection_modifyitems(config, items):
    # bin/test's run (--suite-run) puts benchmark.json in --artifacts; only a run with benchmarks
    # gets one (pytest-benchmark warns about an empty one).
    bench = getattr(config, "_benchmarksession", None)
    settings = settings_of(config)
    if bench is not None and bench.json is None and settings.suite_run \
            and any("benchmark" in getattr(item, "fixturenames", ()) for item in items):
        bench.json = settings.artifacts / "benchmark.json"


def sessionfinish(session) -> None:
    """Under -n every worker collects the benchmark test but one runs it: the other has nothing to
    write, and pytest-benchmark would warn "Not saving anything" into a quiet run's output."""
    bench = getattr(session.config, "_benchmarksession", None)
    if bench is not None and bench.json is not None and not bench.benchmarks:
        bench.json = None


def update_machine_info(config, machine_info):
    state = state_of(config)
    machine_info["board_id"] = state.board
    machine_info["board"] = state.identity
    machine_info["backend"] = state.settings.backend


def compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    saved = compared_benchmark.get("machine_info", {}).get("board_id")
    if saved and saved != machine_info.get("board_id"):
        benchmarksession.logger.warning(
            f"comparing against a baseline from board {saved}, this is {machine_info.get('board_id')}")
