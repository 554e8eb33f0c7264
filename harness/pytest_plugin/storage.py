"""pytest-benchmark integration: baselines stored per board, saved atomically, and the board
identity in every saved run's machine info."""
from __future__ import annotations

import pytest

from ..model.config import REPO_ROOT
from .state import BOARD, IDENTITY, SETTINGS

__all__ = ["pytest_configure", "pytest_sessionstart", "pytest_collection_modifyitems", "atomic_json", "pytest_benchmark_update_machine_info",
           "pytest_benchmark_compare_machine_info", "atomic_save"]


def pytest_configure(config):
    # pytest-benchmark files baselines under a machine id that is the same for every board of a kind
    # (OS-Python-bits): give each board its own storage so --benchmark-compare compares like with like.
    if getattr(config.option, "benchmark_storage", None) in (None, "file://./.benchmarks"):
        if hasattr(config.option, "benchmark_storage"):
            config.option.benchmark_storage = f"file://{REPO_ROOT / '.benchmarks' / config.stash[BOARD]}"


def pytest_sessionstart(session):
    bench = getattr(session.config, "_benchmarksession", None)
    if bench is None:
        return          # pytest-benchmark not active (-p no:benchmark): nothing is saved
    if not hasattr(bench, "storage"):
        raise pytest.UsageError(_UNSUPPORTED.format("its session has no 'storage'"))
    atomic_save(bench.storage)
    atomic_json(bench)


# What atomic_save needs from pytest-benchmark's FileStorage (4.x/5.x): a changed release must stop
# the run with this message, not quietly save baselines the tearable way again.
_UNSUPPORTED = ("anima: this pytest-benchmark cannot have its baselines saved atomically ({}); "
                "pin a supported pytest-benchmark or adapt harness/pytest_plugin/storage.py")
_NEEDED = ("get", "_next_num", "logger", "save")


def atomic_json(bench) -> None:
    """--benchmark-json written atomically (pytest-benchmark writes it with a plain open/write)."""
    from pytest_benchmark.utils import safe_dumps

    from ..core.atomic import atomic_write_bytes

    def save_json(output_json):
        atomic_write_bytes(bench.json, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
        bench.logger.info(f"Wrote benchmark data in: {bench.json}", purple=True)

    bench.save_json = save_json


def pytest_collection_modifyitems(session, config, items):
    # bin/test's run (--suite-run) puts benchmark.json in --artifacts; only a run with benchmarks
    # gets one (pytest-benchmark warns about an empty one).
    bench = getattr(config, "_benchmarksession", None)
    if bench is not None and bench.json is None and config.stash[SETTINGS].suite_run \
            and any("benchmark" in getattr(item, "fixturenames", ()) for item in items):
        bench.json = config.stash[SETTINGS].artifacts / "benchmark.json"


def atomic_save(storage) -> bool:
    """Route a pytest-benchmark file storage's `save` through the atomic writer.

    pytest-benchmark writes a saved run (the next baseline) with a plain open/write: a runner killed
    mid-save would leave a torn baseline that breaks every later --benchmark-compare. Returns False
    for a storage that is not a file storage (e.g. elasticsearch), which is left as it is; raises
    pytest.UsageError when a file storage lacks what the replacement relies on.
    """
    import inspect

    from pytest_benchmark.storage.file import FileStorage
    if not isinstance(storage, FileStorage):
        return False
    from pytest_benchmark.utils import safe_dumps

    from ..core.atomic import atomic_write_bytes
    missing = [name for name in _NEEDED if not hasattr(storage, name)]
    if missing:
        raise pytest.UsageError(_UNSUPPORTED.format(f"FileStorage lacks {', '.join(missing)}"))
    params = list(inspect.signature(storage.save).parameters)
    if params != ["output_json", "save"]:
        raise pytest.UsageError(_UNSUPPORTED.format(f"FileStorage.save takes {params}"))

    def save(output_json, save):
        path = storage.get(f"{storage._next_num}_{save}.json")
        atomic_write_bytes(path, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
        storage.logger.info(f"Saved benchmark data in: {path}")

    storage.save = save
    return True


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["board_id"] = config.stash[BOARD]
    machine_info["board"] = config.stash[IDENTITY]
    machine_info["backend"] = config.stash[SETTINGS].backend


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    saved = compared_benchmark.get("machine_info", {}).get("board_id")
    if saved and saved != machine_info.get("board_id"):
        benchmarksession.logger.warning(
            f"comparing against a baseline from board {saved}, this is {machine_info.get('board_id')}")
