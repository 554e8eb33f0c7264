"""The suite under pytest-xdist (-n 2, harness/pytest_plugin/workers.py): a test that times or measures memory
runs with nothing else running, the controller writes the session's files once with every worker's tests in
them, and -n is ignored where the gates must run serially."""
import json
import os
import subprocess
import sys

import pytest

from harness.model.config import REPO_ROOT

SPANS = """
import json, os, time
from pathlib import Path

def span(name):
    start = time.monotonic()
    time.sleep(0.4)
    with Path(os.environ["SPANS"]).open("a") as fh:
        fh.write(json.dumps([name, os.getpid(), start, time.monotonic()]) + "\\n")
"""
GATES = """
import pytest
from spans import span

@pytest.mark.npu
@pytest.mark.parametrize("i", range(3))
def test_gate(i):
    span(f"gate{i}")
"""
# The gates of a second module: still on the first module's worker (one work unit, whatever the module).
MEMORY = """
import pytest
from spans import span

@pytest.mark.memory
def test_memory_gate():
    span("memory")
"""
OTHERS = """
import pytest
from spans import span

@pytest.mark.parametrize("i", range(3))
def test_other(i):
    span(f"other{i}")

def test_fails():
    assert False, "a failure on the other worker"
"""
# The other tests in two modules (a work unit is a module): after the gates both workers run them, each
# holding the room shared beside the other, instead of one worker running all six while the other idles.
OTHERS_TOO = """
import pytest
from spans import span

@pytest.mark.parametrize("i", range(3, 6))
def test_other_too(i):
    span(f"other{i}")
"""
MORE = """
from spans import span

def test_more():
    span("more")
"""
# A benchmark both workers collect and one runs: the other has nothing to save.
BENCH = "def test_bench(benchmark):\n    benchmark(sum, [1, 2])\n"


class Result:
    def __init__(self, proc):
        self.ret, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr


def run(path, *args) -> Result:
    """The modules above as a suite session of their own, in `path`."""
    modules = (("spans", SPANS), ("test_gates", GATES), ("test_memory", MEMORY), ("test_others", OTHERS),
               ("test_others_too", OTHERS_TOO), ("test_more", MORE), ("test_bench", BENCH))
    for name, text in modules:
        (path / f"{name}.py").write_text(text)
    env = {**os.environ, "SPANS": str(path / "spans.jsonl"), "PYTHONPATH": f"{path}:{REPO_ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={path}",
                           "-p", "no:cacheprovider", "--suite-run", "--cases=seven",
                           f"--artifacts={path / 'artifacts'}", f"--results=sqlite:///{path / 'results.sqlite'}",
                           "test_gates.py", "test_memory.py", "test_others.py", "test_others_too.py", "test_more.py",
                           "test_bench.py",
                           *args],
                          cwd=path, env=env, capture_output=True, text=True, timeout=300)
    return Result(proc)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    path = tmp_path_factory.mktemp("distributed")
    return run(path, "-n", "2"), path


def spans(path) -> list:
    return [json.loads(line) for line in (path / "spans.jsonl").read_text().splitlines()]


def test_tests_ran_on_both_workers_and_the_gates_on_one(session):
    result, path = session
    assert "12 passed" in result.stdout and "1 failed" in result.stdout, result.stdout + result.stderr
    ran = spans(path)
    assert len({pid for _, pid, _, _ in ran}) == 2, ran
    assert len({pid for name, pid, _, _ in ran if name.startswith(("gate", "memory"))}) == 1, ran


def test_a_gate_runs_with_nothing_else_running(session):
    _, path = session
    ran = spans(path)
    alone = [s for s in ran if s[0].startswith(("gate", "memory"))]
    for name, _, start, end in alone:
        overlapping = [s[0] for s in ran if s[0] != name and s[2] < end and s[3] > start]
        assert not overlapping, f"{name} ran beside {overlapping}"


def test_the_gates_run_first_as_one_block(session):
    """The group takes the room before the other worker's first test and keeps it to its last test: no gate
    waits for a long test the other worker began meanwhile (each wait is a core idle)."""
    _, path = session
    ran = spans(path)
    gates = [s for s in ran if s[0].startswith(("gate", "memory"))]
    others = [s for s in ran if not s[0].startswith(("gate", "memory"))]
    assert max(end for *_, end in gates) <= min(start for _, _, start, _ in others), ran


def test_the_controller_writes_one_report_with_every_workers_tests(session):
    result, path = session
    artifacts = path / "artifacts"
    report = json.loads((artifacts / "session.json").read_text())
    assert report["status"] == "failed" and report["exit_code"] == 1
    assert report["tests"] == {"passed": 12, "failed": 1}
    assert report["failed"] == ["test_others.py::test_fails"]
    junit = (artifacts / "junit.xml").read_text()
    assert junit.count("<testcase ") == 13
    summary = (artifacts / "summary.md").read_text()       # the npu tests' summary, from the gate worker
    assert "test_gates.py::test_gate[2]" in summary and "test_others" not in summary
    assert (artifacts / "report.html").exists()


def test_the_report_header_is_the_controllers(session):
    result, _ = session
    assert "anima: backend onnxruntime (asked: auto), board " in result.stdout
    assert "created: 2/2 workers" in result.stdout


@pytest.mark.slow          # a distributed session of its own
def test_a_distributed_run_that_collected_nothing_fails(tmp_path):
    result = run(tmp_path, "-n", "2", "-k", "no_such_test")
    assert result.ret == 1, result.stdout + result.stderr
    assert "error: no tests were collected" in result.stderr


@pytest.mark.slow          # a session of its own
def test_n_is_ignored_with_require_npu(tmp_path):
    result = run(tmp_path, "-n", "2", "--require-npu", "-k", "test_more")
    assert "-n ignored: the npu gates run one after another" in result.stdout + result.stderr
    assert "created: 2/2 workers" not in result.stdout


def test_the_worker_that_timed_no_benchmark_writes_no_file_and_no_warning(session):
    """Both workers collect a benchmark test, one runs it: the other has nothing to save, and
    pytest-benchmark's "Not saving anything" must not reach a quiet run's output; the controller still
    writes the one benchmark.json. (The module's one distributed session: a session of its own cost ~2 s.)"""
    result, path = session
    out = result.stdout + result.stderr
    assert "Not saving anything" not in out, out
    saved = json.loads((path / "artifacts" / "benchmark.json").read_text())
    assert [b["name"] for b in saved["benchmarks"]] == ["test_bench"], saved["benchmarks"]
