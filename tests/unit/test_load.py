"""tests/load.py for real: a measurement a neighbour starved ends in one line naming the load (a skip here, a
failure under CI=true); a miss the work makes itself fails with its number, busy machine or not."""
from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time

import psutil
import pytest

from harness.model.config import REPO_ROOT
from tests.load import Watch

MiB = 1 << 20


@pytest.fixture
def crowded_core():
    """This thread on one CPU with the repository's busy neighbour (tests/busy.py: two spinners and the
    200 MiB churn) moved onto the same CPU: the thread gets about a third of it."""
    cpu, kept = max(os.sched_getaffinity(0)), os.sched_getaffinity(0)
    busy = subprocess.Popen([sys.executable, "-m", "tests.busy"], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout.readline().startswith("busy: spinning (pids ")
        for worker in psutil.Process(busy.pid).children():
            os.sched_setaffinity(worker.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        yield
    finally:
        os.sched_setaffinity(0, kept)
        busy.terminate()
        busy.wait()


def _work(cpu_seconds: float) -> float:
    """Wall seconds of `cpu_seconds` of this thread's own CPU time."""
    start, own = time.perf_counter(), time.thread_time()
    while time.thread_time() - own < cpu_seconds:
        pass
    return time.perf_counter() - start


@pytest.mark.timed          # it crowds a core on purpose: never beside a test that measures
@pytest.mark.parametrize("ci", ["", "true"])
def test_a_wall_time_a_neighbour_stretched_is_one_line_naming_the_load(crowded_core, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with Watch("50 ms of work") as watch:
        took = _work(0.05)
    assert took > 0.1, took                 # two spinners on its core: the work's wall time is stretched
    outcome = pytest.skip.Exception if not ci else pytest.fail.Exception
    with pytest.raises(outcome) as ended:
        watch.at_most(took, 0.08)
    [line] = str(ended.value).splitlines()
    assert line.startswith(f"too busy to measure 50 ms of work: {took * 1e3:.0f} ms against 80 ms, ")
    assert "waiting for a CPU behind other processes (load average " in line and " cores, steal " in line
    assert line.endswith("(CI=true: measure on a machine that gives the test its cores)") == bool(ci)


@pytest.mark.timed
def test_a_wall_time_the_work_itself_overran_fails_with_its_number(monkeypatch):
    """A sleep is no neighbour's: 300 ms against 100 ms fails as a defect, on a busy machine as on a quiet one
    (CI=true, so that a miss wrongly put on the neighbour fails too, with the other line)."""
    monkeypatch.setenv("CI", "true")
    with Watch("a 300 ms sleep") as watch:
        start = time.perf_counter()
        time.sleep(0.3)
        took = time.perf_counter() - start
    with pytest.raises(pytest.fail.Exception) as ended:
        watch.at_most(took, 0.1)
    assert str(ended.value).startswith(f"a 300 ms sleep: {took * 1e3:.1f} ms, over its 100.0 ms by more than the ")
    watch.at_most(took, 0.35)               # within its bound it holds, whatever the load


def _pss() -> int:
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Pss in /proc/self/smaps_rollup")


@pytest.mark.memory
def test_a_pss_another_process_moved_is_one_line_and_a_missing_allocation_fails(disk_path, monkeypatch):
    """Our PSS of a file halves when another process maps it: 8 MiB allocated reads as less than nothing
    added, which the file's move explains. Nothing allocated, no move to explain it: a failure."""
    monkeypatch.delenv("CI", raising=False)
    shared = disk_path / "shared.bin"       # a file on a disk: its pages are Pss_File
    shared.write_bytes(os.urandom(64 * MiB))
    with open(shared, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        sum(m[::4096])
        with Watch("8 MiB allocated") as watch:
            before = _pss()
            other = subprocess.Popen([sys.executable, "-c", "import mmap, sys\nf = open(sys.argv[1], 'rb')\n"
                                      "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\nsum(m[::4096])\n"
                                      "print('mapped', flush=True)\nsys.stdin.read()", str(shared)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert other.stdout.readline().strip() == "mapped"
            held = mmap.mmap(-1, 8 * MiB)      # new pages (numpy's allocator reused resident ones in a long session)
            for offset in range(0, len(held), mmap.PAGESIZE):
                held[offset] = 1
            added = _pss() - before
        other.stdin.close()
        other.wait()
    assert added < 0, added / MiB               # the file's share fell by more than the 8 MiB rose
    with pytest.raises(pytest.skip.Exception, match=r"^too busy to measure 8 MiB allocated: -\d+\.\d MiB against "
                                                    r"7\.6 MiB, while other processes moved our share of shared "
                                                    r"pages by -\d+\.\d MiB \(load average "):
        watch.at_least_memory(added, int(len(held) * 0.95))
    with Watch("8 MiB allocated") as quiet:
        before = _pss()
        added = _pss() - before
    with pytest.raises(pytest.fail.Exception, match=r"^8 MiB allocated: -?\d+\.\d MiB, short of 7\.6 MiB"):
        quiet.at_least_memory(added, int(len(held) * 0.95))
