"""The benchmark gate's session against a results store that fails, run as a real pytest process: a
`--results` that is no URL or names a driver that is not installed is refused at configure time; a store
stamped with a schema revision newer than the checkout stops the session before any test runs, with
junit.xml, report.html and session.json still written; a PostgreSQL server stopped between the store's
open and the verdict's read, or between that read and the run's write, costs the verdict but not the
run: it is kept in the spool store named in the line, and the `results push` that line gives sends it.
One line each, no traceback, the store as it was."""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from harness.model.config import REPO_ROOT
from harness.results.store import ResultsStore
from tests.results_data import make_run

BOARD_TREE = REPO_ROOT / "tests" / "data" / "sysfs-rk3588"

pytestmark = [pytest.mark.slow, pytest.mark.results]      # one one-step gate session each (~10 s)

FUTURE = "ffff_from_a_newer_checkout"


@pytest.fixture(scope="module")
def partition_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("partition-cache")


@pytest.fixture
def session(tmp_path, partition_cache):
    """Run the benchmark gate (one step, case seven) in a pytest process of its own."""
    def run(results: str, *args: str, gate: str = "test_benchmark.py", **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "pytest.ini"), f"--rootdir={REPO_ROOT}",
             "-p", "no:cacheprovider", "-p", "tests.stop_server", str(REPO_ROOT / "tests/acceptance" / gate),
             "--bench-steps=1", "--cases=seven", "--suite-run", f"--artifacts={tmp_path / 'artifacts'}",
             f"--cache-dir={partition_cache}", f"--results={results}",
             f"--results-spool={tmp_path / 'spool.sqlite'}", "-q", "-p", "no:randomly", *args],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, **env})
    return run


def _lines_with(done: subprocess.CompletedProcess, needle: str) -> list[str]:
    assert "Traceback" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
    # pytest's short summary repeats the failure's message (whole, not cut to the terminal, when CI is set)
    return [line for line in (done.stdout + done.stderr).splitlines()
            if needle in line and not line.startswith(("FAILED ", "ERROR "))]


@pytest.mark.parametrize("url, said", [
    ("notaurl", "ERROR: --results 'notaurl': not a database URL"),
    ("postgresql+pg8000://ci@fleet-db/anima", "ERROR: --results postgresql+pg8000://ci@fleet-db/anima: database "
                                              "driver 'postgresql+pg8000' is not installed"),
])
def test_a_results_url_the_suite_cannot_open_is_refused_before_any_test_runs(session, tmp_path, url, said):
    done = session(url)
    assert done.returncode == 4, done.stdout[-2000:]        # pytest's usage error, as every bad option
    (line,) = _lines_with(done, "--results")
    assert line.startswith(said)
    assert "passed" not in done.stdout and "failed" not in done.stdout
    assert not (tmp_path / "artifacts").exists(), "refused before the session started: nothing written"


def test_a_store_newer_than_the_checkout_stops_the_session_before_any_test_with_its_reports(session, tmp_path):
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    with ResultsStore(url) as store:
        store.add_run(make_run("r1"))
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": FUTURE})
    done = session(url)
    assert done.returncode == 1
    (line,) = _lines_with(done, FUTURE)
    assert re.search(rf"--results: no test run: results store sqlite:///\S+: schema revision {FUTURE} is newer than "
                     r"this checkout's \(\w+\): update the checkout to use it; nothing was written", line)
    assert "seven" not in done.stdout, "no test ran"
    artifacts = tmp_path / "artifacts"
    report = json.loads((artifacts / "session.json").read_text())
    assert (report["status"], report["exit_code"], report["tests"]) == ("failed", 1, {})
    assert report["error"].startswith("results store sqlite:///") and report["error"] in line
    assert (artifacts / "junit.xml").is_file()
    assert FUTURE in (artifacts / "report.html").read_text()
    engine = create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [FUTURE]
        assert conn.execute(text("SELECT run_id FROM runs")).scalars().all() == ["r1"]
    engine.dispose()


@pytest.mark.parametrize("stop_at, test_line, board", [
    ("FROM runs", "seven: benchmark ran but was not judged: results store", ()),        # between open and read
    # filing the run under its board (a board tree with a serial; the faults backend, not the board's
    # runtime it would choose): the first read of all (issue 41)
    ("WHERE runs.serial_hash", "seven: benchmark ran but was not judged: results store",
     (f"--telemetry-root={BOARD_TREE}", "--backend=faults")),
    ("INSERT INTO runs", None, ()),                                                    # between read and write
])
def test_a_server_lost_mid_session_keeps_the_run_in_the_spool_and_push_sends_it(
        session, tmp_path, lost_server, stop_at, test_line, board):
    url = lost_server.database()
    with ResultsStore(url) as store:
        store.add_run(make_run("earlier"))
    done = session(url, *board, STOP_SERVER_AT=stop_at)       # tests/stop_server.py, in the session's process
    assert done.returncode == 1
    if test_line:
        (line,) = _lines_with(done, test_line)
        assert ("reading" in line or "filing" in line) and "the run is kept for the session's end" in line, line
        assert "`bin/harness results push` sends" in line, line
    (line,) = _lines_with(done, "benchmark run not written: ")
    spool = tmp_path / "spool.sqlite"
    assert f"the store is as it was; kept in the spool {spool}: `bin/harness results push" in line
    lost_server.resume()
    with ResultsStore(url) as store:
        assert [r.run_id for r in store.runs()] == ["earlier"], "nothing of the run in the store"
    with ResultsStore(f"sqlite:///{spool}") as kept:
        (run,) = kept.runs()
        assert run.key.case == "seven" and run.step_s and run.subgraphs, "kept whole"
    command = shlex.split(re.search(r"`bin/harness (results push [^`]+)`", line).group(1))
    pushed = subprocess.run([str(REPO_ROOT / "bin/harness"), *command], capture_output=True, text=True, timeout=300)
    assert pushed.returncode == 0 and pushed.stdout.strip().endswith("1 run(s) pushed, 0 already there"), pushed.stderr
    with ResultsStore(url) as store:
        assert [r.run_id for r in store.runs()] == ["earlier", run.run_id] and store.runs()[1] == run


def test_an_ab_session_whose_server_is_lost_is_kept_in_the_spool_and_push_sends_it_whole(
        session, tmp_path, lost_server, a_partition):
    url = lost_server.database()
    done = session(url, f"--ab-a={a_partition}", "--ab-rounds=6", "--backend=faults",
                   gate="test_benchmark_ab.py", STOP_SERVER_AT="INSERT INTO runs")
    assert done.returncode == 1
    (line,) = _lines_with(done, "A/B session ran but was not recorded: ")
    spool = tmp_path / "spool.sqlite"
    assert re.search(rf"A/B session '[^']+' not written \(.+\); the store is as it was; kept in the spool {spool}: ",
                     line)
    lost_server.resume()
    with ResultsStore(url) as store:
        assert store.runs() == [] and store.ab_sessions() == []
    with ResultsStore(f"sqlite:///{spool}") as kept:
        (ab,) = kept.ab_sessions()
    command = shlex.split(re.search(r"`bin/harness (results push [^`]+)`", line).group(1))
    pushed = subprocess.run([str(REPO_ROOT / "bin/harness"), *command], capture_output=True, text=True, timeout=300)
    assert pushed.returncode == 0, pushed.stderr
    with ResultsStore(url) as store:
        assert store.ab_sessions() == [ab]
