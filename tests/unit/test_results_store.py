"""The results store on a real SQLite file and a real PostgreSQL server: what goes in comes out whole,
a corrupt value never gets in, two writers lose nothing, a writer killed mid-run leaves no half run."""
from __future__ import annotations

import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from sqlalchemy import insert, text
from sqlalchemy.exc import DBAPIError

from harness.model.config import REPO_ROOT
from harness.results.records import ResultsError
from harness.results.store import ResultsStore
from harness.results.tables import metadata, runs
from tests.postgres import reap_stale_clusters
from tests.results_data import make_ab_record, make_run

pytestmark = pytest.mark.results


def test_a_run_comes_back_whole(results_url):
    with ResultsStore(results_url) as store:
        run = make_run("r1", 1.25)
        store.add_run(run)
        assert store.runs() == [run]
        assert store.runs(board="another") == []
        store.set_baseline(run, "saved")
        assert store.baseline(run.board_id, run.key.experiment) == (run, "saved")


def test_run_ids_are_unique(results_url):
    with ResultsStore(results_url) as store:
        store.add_run(make_run("r1"))
        with pytest.raises(ResultsError, match="run 'r1' of case 'cat' is already stored"):
            store.add_run(make_run("r1", 2.0))
        assert [r.mean_step_s for r in store.runs()] == [1.0]


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0.0])
def test_a_corrupt_figure_never_becomes_a_run(value):
    with pytest.raises(ResultsError, match="mean_step_s must be"):
        make_run("r1", value)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-1", "0"])
def test_the_database_itself_rejects_a_corrupt_row(results_url, value):
    # Another tool writing SQL straight into the store is held to the same rules by CHECK constraints.
    with ResultsStore(results_url) as store:
        row = dict(run_id="x", case_name="c", time="2026-11-01T00:00:00+00:00", board_id="b", board_model="m",
                   model="e", backend="onnxruntime", precision="float16", steps=4, manifest_hash="h", versions="{}",
                   key_digest="k", experiment="e", valid=True, invalid_reasons="[]", total_denoise_s=1.0)
        with pytest.raises(DBAPIError), store.engine.begin() as conn:
            conn.execute(insert(runs).values(**row, mean_step_s=text(f"CAST('{value}' AS REAL)")
                                             if store.engine.dialect.name == "sqlite" else float(value)))
        assert store.runs() == []


def test_schema_migrations_match_the_tables(results_url):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    with ResultsStore(results_url) as store, store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []


def test_the_schema_head_is_alembics_and_a_store_at_it_opens_without_alembic(results_url):
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from harness.results.store import MIGRATIONS, SCHEMA_HEAD
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_HEAD
    ResultsStore(results_url).close()        # made and migrated here; the next open is a new process's
    opened = subprocess.run(
        [sys.executable, "-c", "import sys; from harness.results.store import ResultsStore; "
         f"ResultsStore({results_url!r}).close(); print(sorted(m for m in sys.modules if m.startswith('alembic')))"],
        capture_output=True, text=True, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, check=True)
    assert opened.stdout.strip() == "[]", opened.stdout


_WRITER = textwrap.dedent("""
    import sys
    from harness.results.store import ResultsStore
    from tests.results_data import make_run
    url, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = ResultsStore(url)
    print("open", flush=True)
    sys.stdin.readline()                    # both writers start together
    for i in range(count):
        store.add_run(make_run(f"{name}-{i}", 1.0 + i / 1000, minute=i))
""")


def test_two_writers_at_once_lose_nothing(results_url):
    count = 40
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, results_url, name, str(count)], cwd=REPO_ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name in ("a", "b")]
    for w in writers:
        assert w.stdout.readline().strip() == "open", w.stderr.read()
    for w in writers:
        w.stdin.write("go\n")
        w.stdin.flush()
    for w in writers:
        assert w.wait(timeout=300) == 0, w.stderr.read()
    with ResultsStore(results_url) as store:
        stored = store.runs()
    assert sorted(r.run_id for r in stored) == sorted(f"{n}-{i}" for n in "ab" for i in range(count))
    assert all(len(r.subgraphs) == 6 and len(r.step_s) == 4 for r in stored)


def _killed_at(url: str, statement: str, script: str) -> subprocess.Popen:
    """Run `script` (given the store's URL) in a child that stops before the first SQL statement holding
    `statement` (tests/pause_writes.py), and kill it there with SIGKILL."""
    paused = Path(tempfile.mkdtemp()) / "paused"
    child = subprocess.Popen([sys.executable, "-c", "import tests.pause_writes\n" + script, url], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PAUSE_AT": statement, "PAUSE_FILE": str(paused)})
    try:
        deadline = time.monotonic() + 120
        while not paused.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert paused.exists(), child.stderr.read() if child.poll() is not None else "never reached"
    finally:
        child.kill()
        child.wait(timeout=60)
        shutil.rmtree(paused.parent, ignore_errors=True)
    return child


# The writer stops inside its transaction, after the run's row and before its subgraph rows; the
# test kills it there with SIGKILL.
_KILLED = textwrap.dedent("""
    import os, sys
    from harness.results.store import ResultsStore
    from tests.results_data import make_run
    store = ResultsStore(sys.argv[1])
    pause_at = os.environ.pop("PAUSE_AT")       # not in the first run: it is to be stored whole
    store.add_run(make_run("before"))
    os.environ["PAUSE_AT"] = pause_at
    store.add_run(make_run("killed"))
""")


def test_a_writer_killed_mid_run_leaves_the_store_readable_without_the_half_run(results_url):
    child = _killed_at(results_url, "INSERT INTO run_subgraphs", _KILLED)
    assert child.returncode == -signal.SIGKILL
    with ResultsStore(results_url) as store:
        assert [r.run_id for r in store.runs()] == ["before"]
        with store.engine.connect() as conn:    # no orphaned stage or step rows of the killed run
            assert conn.execute(text("SELECT COUNT(*) FROM run_steps")).scalar() == 4
        store.add_run(make_run("after", minute=1))
        assert [r.run_id for r in store.runs()] == ["before", "after"]


def test_a_writer_killed_at_a_random_moment_leaves_only_whole_runs(results_url):
    # no pause this time: killed wherever it is in a stream of writes, once it has written a run
    child = subprocess.Popen([sys.executable, "-c", _WRITER, results_url, "k", "5000"], cwd=REPO_ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "open", child.stderr.read()
    with ResultsStore(results_url) as watcher:
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 120
        while not watcher.has_run("k-0", "cat") and time.monotonic() < deadline:
            time.sleep(0.005)
    time.sleep(random.uniform(0, 0.05))
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)
    with ResultsStore(results_url) as store:
        stored = store.runs()
        with store.engine.connect() as conn:
            rows = {t: conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar()
                    for t in ("run_stages", "run_branches", "run_steps", "run_subgraphs", "run_quality")}
    assert 0 < len(stored) < 5000, "the writer was to be killed part way"
    assert all(len(r.stages) == 4 and len(r.subgraphs) == 6 for r in stored)
    n = len(stored)
    assert rows == {"run_stages": 4 * n, "run_branches": 3 * n, "run_steps": 4 * n, "run_subgraphs": 6 * n,
                    "run_quality": n}, "rows of a run that is not in the store"


def test_push_copies_what_the_fleet_store_lacks_once(tmp_path, postgres_cluster):
    local = ResultsStore(f"sqlite:///{tmp_path / 'board.sqlite'}")
    fleet = ResultsStore(postgres_cluster.database())
    for i in range(3):
        local.add_run(make_run(f"r{i}", minute=i))
    local.set_baseline(local.runs()[1], "saved")
    fleet.add_run(make_run("r0"))
    assert local.push(fleet) == (2, 1)
    assert local.push(fleet) == (0, 3)          # idempotent: a second push copies nothing
    assert [r.run_id for r in fleet.runs()] == ["r0", "r1", "r2"]
    run = fleet.runs()[1]
    assert fleet.baseline(run.board_id, run.key.experiment) == (run, "saved")


def test_a_bad_url_is_one_line():
    with pytest.raises(ResultsError, match="not a database URL"):
        ResultsStore("results.sqlite")
    with pytest.raises(ResultsError, match="choose a sqlite:/// or postgresql://"):
        ResultsStore("mysql://x/y")


@pytest.mark.parametrize("ci, outcome", [("true", {"errors": 1}), ("", {"skipped": 1})])
def test_a_missing_postgresql_server_fails_in_ci_and_skips_elsewhere(pytester, monkeypatch, ci, outcome):
    import tests.postgres
    monkeypatch.setenv("CI", ci)
    # a machine without initdb; undone after the test (set inside the run it outlived it, the module
    # being this process's own, and later cluster fixtures of the session found no server)
    monkeypatch.setattr(tests.postgres, "find_pg_bin", lambda: None)
    pytester.makeconftest("from tests.postgres_fixtures import postgres_cluster  # noqa: F401\n")
    pytester.makepyfile(test_needs_server="def test_server(postgres_cluster):\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:harness.pytest_plugin", "-rs")
    result.assert_outcomes(**outcome)
    result.stdout.fnmatch_lines(["*no PostgreSQL server (initdb) here: install Debian's postgresql*"])


# A test session holding the cluster fixture, stopped inside its test until it is killed.
_HOLDER = textwrap.dedent("""
    import time
    def test_hold(postgres_cluster):
        print("cluster", postgres_cluster.root, flush=True)
        time.sleep(600)
""")


def _held_cluster(pytester):
    """A real pytest process holding a cluster: (the process, the cluster's folder, its server's pid)."""
    pytester.makeconftest("from tests.postgres_fixtures import postgres_cluster  # noqa: F401\n")
    pytester.makepyfile(test_holder=_HOLDER)
    child = subprocess.Popen([sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", "test_holder.py"],
                             cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    for line in child.stdout:       # "test_holder.py cluster /tmp/anima-pg-..."
        if "cluster " in line:
            root = Path(line.split("cluster ", 1)[1].strip())
            return child, root, int((root / "data" / "postmaster.pid").read_text().split()[0])
    child.wait(timeout=60)
    pytest.fail(f"the holding session ended without a cluster (exit {child.returncode})")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pid: int, root: Path, seconds: float = 30) -> bool:
    """The server `pid` has stopped and its folder is removed, within `seconds`."""
    deadline = time.monotonic() + seconds
    while _running(pid) or root.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_leftover(root: Path, pid: int) -> None:
    """What the test found left behind, stopped so the machine is as it was whatever the outcome."""
    if _running(pid):
        os.kill(pid, signal.SIGQUIT)        # the server's immediate shutdown
    shutil.rmtree(root, ignore_errors=True)
    assert _gone(pid, root), f"postgres -D {root / 'data'} did not stop"


def test_a_sigkilled_test_session_leaves_no_postgresql_server_behind(pytester, postgres_cluster):
    child, root, server = _held_cluster(pytester)
    try:
        assert psutil.Process(server).cmdline()[:3] == [str(postgres_cluster.bin / "postgres"), "-D",
                                                        str(root / "data")]
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        assert _gone(server, root), f"postgres -D {root / 'data'} still runs after its test session was killed"
    finally:
        _kill_leftover(root, server)


def test_a_cluster_whose_owner_and_watchdog_were_killed_is_reaped_at_the_next_start(pytester, postgres_cluster):
    child, root, server = _held_cluster(pytester)
    try:
        watchdog = next(p for p in psutil.Process(child.pid).children() if "postgres.py" in " ".join(p.cmdline()))
        watchdog.kill()         # in a session of its own: killed apart, as an OOM kill would
        while _running(watchdog.pid):
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        assert _running(server), "nothing was to stop the server yet"
        assert reap_stale_clusters(postgres_cluster.bin) == [root]
        assert _gone(server, root)
        assert postgres_cluster.root.exists(), "the reaper stopped a cluster whose owner is alive"
    finally:
        _kill_leftover(root, server)


def test_an_ab_session_comes_back_whole_and_its_sides_are_runs_of_their_own_keys(results_url):
    record = make_ab_record("s1", 1.10)
    with ResultsStore(results_url) as store:
        store.add_ab_session(record)
        (back,) = store.ab_sessions()
        assert back == record
        assert back.regression and {v.label for v in back.verdicts if v.regression} == {"step", "ffn core", "init"}
        # the sides are runs like any other, each under its own partition's key
        assert store.runs(key=record.b.key.digest) == [record.b]
        assert store.runs(key=record.a.key.digest) == [record.a]
        # kept under the sides' stored keys, as every store written before the words A and B
        assert (record.a.run_id, record.b.run_id) == ("s1-baseline", "s1-candidate")
        with store.engine.connect() as conn:
            sides = {r[0] for r in conn.execute(text("SELECT DISTINCT side FROM ab_rounds"))}
        assert sides == {"baseline", "candidate"}
        with pytest.raises(ResultsError, match="A/B session 's1' of case 'cat' rejected"):
            store.add_ab_session(record)
        assert len(store.ab_sessions()) == 1 and len(store.runs()) == 2


def test_an_ab_session_killed_mid_write_leaves_nothing_of_it(results_url):
    # killed after both sides' runs and the rounds are written, before the verdicts
    _killed_at(results_url, "INSERT INTO ab_verdicts", "import sys\nfrom harness.results.store import ResultsStore\n"
               "from tests.results_data import make_ab_record\n"
               "ResultsStore(sys.argv[1]).add_ab_session(make_ab_record('killed'))")
    with ResultsStore(results_url) as store:
        assert store.ab_sessions() == [] and store.runs() == []
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM ab_rounds")).scalar() == 0


def test_a_store_of_the_initial_revision_is_upgraded_and_its_ab_verdicts_read_without_p_values(results_url):
    from dataclasses import replace

    from alembic import command
    from alembic.config import Config

    from harness.results.store import MIGRATIONS
    record = make_ab_record("s1", 1.10)
    assert all(v.p_value is not None for v in record.verdicts)
    with ResultsStore(results_url) as store:
        store.add_ab_session(record)
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with store.engine.begin() as conn:      # the store as the revision before the Decision left it
            config.attributes["connection"] = conn
            command.downgrade(config, "initial")
    with ResultsStore(results_url) as store:    # opened by this checkout: upgraded, nothing lost but the p-values
        (back,) = store.ab_sessions()
    assert back.verdicts == tuple(replace(v, statistic=None, p_value=None) for v in record.verdicts)
