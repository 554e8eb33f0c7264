"""Benchmark baselines are saved atomically (harness/pytest_plugin/storage.py), in a real pytest
session with pytest-benchmark, and the patch refuses to switch itself off silently."""
import json
import logging

import pytest
from pytest_benchmark.storage.file import FileStorage

from harness.pytest_plugin.storage import atomic_save

# Loaded by the child session: dies (SIGKILL, as a runner killed by CI or the OOM killer) at the
# moment pytest-benchmark serialises the run it is saving. pytest-benchmark's own save has opened
# (and truncated) the baseline file by then; the atomic writer has not touched the directory yet.
KILL_IN_SAVE = """
import os, signal
import pytest_benchmark.storage.file as storage_file
import pytest_benchmark.utils as utils

real = utils.safe_dumps

def dying(obj, *args, **kwargs):
    if isinstance(obj, dict) and "benchmarks" in obj:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(obj, *args, **kwargs)

utils.safe_dumps = storage_file.safe_dumps = dying
"""


def test_a_save_killed_part_way_leaves_no_torn_baseline(pytester):
    pytester.makeconftest(KILL_IN_SAVE)
    pytester.makepyfile(test_tiny="def test_tiny(benchmark):\n    benchmark.pedantic(sum, (range(10),), rounds=1)\n")
    storage = pytester.path / "bench"
    result = pytester.runpytest_subprocess(
        "-p", "harness.pytest_plugin", "-p", "no:cacheprovider", f"--benchmark-storage=file://{storage}",
        "--benchmark-autosave", f"--artifacts={pytester.path / 'artifacts'}",
        f"--history={pytester.path / 'history.jsonl'}", f"--telemetry-root={pytester.path}")
    assert result.ret == -9, "the child was to be killed inside the save:\n" + str(result.stdout)
    for saved in storage.rglob("*.json"):
        text = saved.read_text()
        try:
            json.loads(text)
        except ValueError:
            pytest.fail(f"a killed save left a torn baseline {saved.name} ({len(text)} bytes): the next "
                        "--benchmark-compare would read it")


def _file_storage(tmp_path) -> FileStorage:
    return FileStorage(tmp_path, logger=logging.getLogger("bench"), default_machine_id="m")


def test_atomic_save_replaces_the_save_of_a_file_storage(tmp_path):
    storage = _file_storage(tmp_path)
    assert atomic_save(storage) is True
    storage.save({"benchmarks": [], "machine_info": {}}, "run")
    assert json.loads((tmp_path / "m" / "0001_run.json").read_text())["benchmarks"] == []
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["0001_run.json"]
    assert atomic_save(object()) is False       # not a file storage (e.g. elasticsearch): left alone


def test_atomic_save_refuses_a_file_storage_it_cannot_patch(tmp_path, monkeypatch):
    monkeypatch.setattr(FileStorage, "save", lambda self, payload: None)
    with pytest.raises(pytest.UsageError, match=r"FileStorage.save takes \['payload'\]"):
        atomic_save(_file_storage(tmp_path))
    monkeypatch.undo()
    monkeypatch.delattr(FileStorage, "_next_num")
    with pytest.raises(pytest.UsageError, match="FileStorage lacks _next_num"):
        atomic_save(_file_storage(tmp_path))
