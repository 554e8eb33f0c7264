"""Every way the results store fails is one line with the stated exit code, and the store as it was: a
real PostgreSQL server stopped between open and read and between read and write, a store stamped with
a schema revision this checkout does not have, a driver that is not installed, an export onto a
symlink or a FIFO, an import file holding one run id twice; and `results check` says what it found in
words, with no numpy warning."""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from sqlalchemy import text

from harness.cli.main import main
from harness.model.config import REPO_ROOT
from harness.results.records import ResultsError
from harness.results.store import ResultsStore, StoreUnavailable
from harness.results.verdict.judging import judge_run
from tests.results_data import make_run

pytestmark = pytest.mark.results

FUTURE = "ffff_from_a_newer_checkout"      # a schema revision no checkout of this code has
_POSTGRESQL = pytest.mark.slow      # a server of its own: the full suite and `-m results`, not the fast tier


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- the server lost -------------------------------------------------------------------------------------

@_POSTGRESQL
def test_every_read_and_write_of_a_store_whose_server_is_gone_is_one_line(lost_server):
    url = lost_server.database()
    store = ResultsStore(url)
    store.add_run(make_run("r1"))
    lost_server.halt()                       # after the open, before the reads
    try:
        for what, call in (("reading runs", lambda: store.runs()),
                           ("reading a baseline", lambda: store.baseline("rock-5c-aaaa", "e")),
                           ("reading", lambda: judge_run(store, make_run("r2", minute=1), 10.0)),
                           ("run 'r2' not written", lambda: store.add_run(make_run("r2", minute=1)))):
            with pytest.raises(StoreUnavailable) as caught:
                call()
            message = str(caught.value)
            assert message.startswith(f"results store {store.where}: {what}") and "\n" not in message
            assert message.endswith("the store is as it was")
    finally:
        lost_server.resume()
        store.close()
    with ResultsStore(url) as again:
        assert [r.run_id for r in again.runs()] == ["r1"]


@_POSTGRESQL
def test_a_server_lost_inside_a_pending_transaction_is_one_line_and_nothing_of_it_remains(lost_server):
    url = lost_server.database()
    with ResultsStore(url) as store:
        store.add_run(make_run("r1"))
        try:
            with pytest.raises(StoreUnavailable) as inside:
                with store.pending([make_run("r2", minute=1)]) as view:
                    lost_server.halt()              # the transaction open, the pending run in it
                    judge_run(view, make_run("r3", minute=2), 10.0)
            with pytest.raises(StoreUnavailable) as opening:
                with store.pending([make_run("r2", minute=1)]):
                    pass
        finally:
            lost_server.resume()
        for caught in (inside, opening):
            assert str(caught.value).startswith(f"results store {store.where}: ") and "\n" not in str(caught.value)
            assert str(caught.value).endswith("the store is as it was")
        assert "opening a transaction failed" in str(opening.value)
    with ResultsStore(url) as again:
        assert [r.run_id for r in again.runs()] == ["r1"]


@_POSTGRESQL
def test_results_check_with_the_server_lost_between_open_and_read_is_one_line(lost_server, monkeypatch, capsys):
    url = lost_server.database()
    with ResultsStore(url) as store:
        store.add_run(make_run("r1"))
    monkeypatch.setenv("STOP_SERVER_AT", "FROM runs")       # the first read after the store was opened
    assert main(["results", "check", "--results", url]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("error: results store postgresql") and "reading runs failed (" in line
    lost_server.resume()
    with ResultsStore(url) as store:
        assert [r.run_id for r in store.runs()] == ["r1"]


@_POSTGRESQL
def test_a_push_whose_target_is_lost_between_read_and_write_is_one_line_and_the_target_unchanged(
        lost_server, tmp_path, monkeypatch, capsys):
    local, fleet = f"sqlite:///{tmp_path / 'board.sqlite'}", lost_server.database()
    with ResultsStore(local) as store:
        store.add_run(make_run("r1"))
        store.add_run(make_run("r2", minute=1))
    monkeypatch.setenv("STOP_SERVER_AT", "INSERT INTO runs")    # after push has read what the target has
    assert main(["results", "push", "--results", local, "--to", fleet]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "run 'r1' not written (" in line and line.endswith("the store is as it was")
    lost_server.resume()
    with ResultsStore(fleet) as store:
        assert store.runs() == []
    assert main(["results", "push", "--results", local, "--to", fleet]) == 0
    assert capsys.readouterr().out.strip().endswith("2 run(s) pushed, 0 already there")


# -- a schema newer than the code ------------------------------------------------------------------------

def _stamp_future(url: str, revision: str = FUTURE) -> None:
    with ResultsStore(url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": revision})


def _state(url: str) -> tuple:
    """What a store holds, read with SQL alone (the store refuses to open)."""
    from sqlalchemy import create_engine
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            return (conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all(),
                    conn.execute(text("SELECT run_id FROM runs ORDER BY id")).scalars().all())
    finally:
        engine.dispose()


def test_a_store_of_a_revision_before_the_squash_is_called_old_not_newer(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    with ResultsStore(url) as store:
        store.add_run(make_run("r1"))
    _stamp_future(url, "0003")
    with pytest.raises(ResultsError, match=r"schema revision 0003 is from before the schema became one revision"):
        ResultsStore(url)
    assert _state(url) == (["0003"], ["r1"])


def test_a_store_stamped_with_a_newer_revision_is_refused_in_one_line_naming_both(results_url, tmp_path, capsys):
    with ResultsStore(results_url) as store:
        store.add_run(make_run("r1"))
    _stamp_future(results_url)
    before = _state(results_url)
    with pytest.raises(ResultsError, match=rf"schema revision {FUTURE} is newer than this checkout's \(\w+\)"):
        ResultsStore(results_url)
    target = tmp_path / "target.sqlite"
    for command in (["results", "check"], ["results", "push", "--to", f"sqlite:///{target}"],
                    ["trend", "--out", str(tmp_path / "trend.png")]):
        assert main([*command, "--results", results_url]) == 2
        line = _one_line(capsys.readouterr().err)
        assert FUTURE in line and "nothing was written" in line
    assert _state(results_url) == before == ([FUTURE], ["r1"]) and not target.exists()


# -- a driver that is not there, a URL that is none ------------------------------------------------------

@pytest.mark.parametrize("url, said", [
    ("postgresql+pg8000://ci@fleet-db/anima", "database driver 'postgresql+pg8000' is not installed"),
    ("postgresql+nosuch://ci@fleet-db/anima", "database driver 'postgresql+nosuch' is unknown to SQLAlchemy"),
    ("notaurl", "--results 'notaurl': not a database URL"),
])
def test_a_url_the_suite_cannot_open_is_one_line(url, said, capsys):
    assert main(["results", "check", "--results", url]) == 2
    assert said in _one_line(capsys.readouterr().err)


# -- export and import -----------------------------------------------------------------------------------

def _store_with(tmp_path, *runs) -> str:
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    with ResultsStore(url) as store:
        for run in runs:
            store.add_run(run)
    return url


@pytest.mark.parametrize("kind", ["symlink", "fifo", "device"])
def test_export_refuses_a_symlink_fifo_or_device_and_leaves_it_as_it_was(tmp_path, capsys, kind):
    url = _store_with(tmp_path, make_run("r1"))
    target = tmp_path / "kept.csv"
    target.write_text("not to be touched\n")
    out = tmp_path / "out.csv"
    if kind == "symlink":
        out.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out = type(out)(os.devnull)         # a character device
    before = os.lstat(out)
    assert main(["results", "export", "--results", url, "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"error: --out {out}: is a ") and "standard output" in line
    after = os.lstat(out)
    assert (after.st_mode, after.st_ino, after.st_size) == (before.st_mode, before.st_ino, before.st_size)
    assert target.read_text() == "not to be touched\n"


def test_import_of_an_export_merges_two_stores_and_a_second_import_adds_nothing(tmp_path, capsys):
    board = _store_with(tmp_path, make_run("r1"), replace(make_run("r2", 1.5, minute=1, valid=False),
                                                          invalid_reasons=("a clock moved", "too hot"),
                                                          host_cpus=2, host_load=0.5, host_probe_s=0.02,
                                                          host_memory_bytes=8 << 30,
                                                          serial_hash="0123456789abcdef",
                                                          device_model="Radxa ROCK 5C"))
    exported = tmp_path / "runs.csv"
    assert main(["results", "export", "--results", board, "--out", str(exported)]) == 0
    fleet = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    with ResultsStore(fleet) as store:
        store.add_run(make_run("r0", board="rock-5c-bbbb"))
    capsys.readouterr()
    assert main(["results", "import", str(exported), "--results", fleet]) == 0
    assert main(["results", "import", str(exported), "--results", fleet]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("2 run(s) imported, 0 already in the store")
    assert out[1].endswith("0 run(s) imported, 2 already in the store")
    with ResultsStore(board) as a, ResultsStore(fleet) as b:
        # the CSV holds every figure a verdict reads and the board's serial and model string (a reflash
        # is told from a new board by them); per-step, per-subgraph and quality rows stay behind
        mine = [replace(r, step_s=(), subgraphs=(), quality={}) for r in a.runs()]
        assert b.runs()[1:] == mine and b.runs()[0].run_id == "r0"
        assert b.runs()[1].key.digest == a.runs()[0].key.digest


def test_an_export_from_before_the_memory_column_imports_with_the_memory_not_recorded(tmp_path):
    board = _store_with(tmp_path, replace(make_run("r1"), host_cpus=2, host_memory_bytes=8 << 30))
    exported = tmp_path / "runs.csv"
    assert main(["results", "export", "--results", board, "--out", str(exported)]) == 0
    rows = list(csv.DictReader(io.StringIO(exported.read_text())))
    assert rows[0]["host_memory_bytes"] == str(8 << 30)
    older = tmp_path / "older.csv"          # the columns an export wrote before host_memory_bytes
    with older.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, [c for c in rows[0] if c != "host_memory_bytes"], lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: v for k, v in row.items() if k != "host_memory_bytes"} for row in rows])
    fleet = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    assert main(["results", "import", str(older), "--results", fleet]) == 0
    with ResultsStore(fleet) as store:
        (run,) = store.runs()
    assert run.host_cpus == 2 and run.host_memory_bytes is None


def test_an_import_file_with_one_run_id_twice_is_refused_whole(tmp_path, capsys):
    board = _store_with(tmp_path, make_run("r1"), make_run("r2", minute=1))
    exported = tmp_path / "runs.csv"
    assert main(["results", "export", "--results", board, "--out", str(exported)]) == 0
    rows = list(csv.reader(io.StringIO(exported.read_text())))
    doubled = tmp_path / "doubled.csv"
    again = list(rows[1])
    again[rows[0].index("mean_step_s")] = "1.5"     # the same run id with other figures: which is the run?
    with doubled.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([*rows, again])
    fleet = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    with ResultsStore(fleet) as store:
        store.add_run(make_run("r0"))
    capsys.readouterr()
    assert main(["results", "import", str(doubled), "--results", fleet]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (f"error: {doubled}: run 'r1' of case 'cat' is on rows 2 and 4: a run id is one run per case; "
                    "nothing imported")
    with ResultsStore(fleet) as store:
        assert [r.run_id for r in store.runs()] == ["r0"]


# -- check: words, not warnings --------------------------------------------------------------------------

def _check(url: str) -> subprocess.CompletedProcess:
    """`bin/harness results check` in a process of its own: Python's default warning filters, as a user sees."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run([sys.executable, "-m", "harness", "results", "check", "--results", url], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


def test_check_on_a_one_run_store_prints_no_numpy_warning(tmp_path):
    url = _store_with(tmp_path, replace(make_run("r1"), host_cpus=2, host_load=0.5, host_probe_s=0.02))
    done = _check(url)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ("cat on rock-5c-aaaa (board-sim, float16, 4 steps): 1 valid run(s), latest run r1\n"
                           "  no baseline yet for cat on board rock-5c-aaaa or its board model Radxa ROCK 5C: this "
                           "run starts the history\n")


def test_check_on_a_store_of_only_invalid_runs_says_so(tmp_path):
    url = _store_with(tmp_path, *(replace(make_run(f"r{i}", minute=i, valid=False), invalid_reasons=("too hot",))
                                  for i in range(2)))
    done = _check(url)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "2 run(s), every one INVALID, so no series to judge (most often: too hot)\n"


def test_a_spool_pushed_again_never_takes_a_board_back_to_an_older_baseline(tmp_path, capsys):
    spool, store = f"sqlite:///{tmp_path / 'spool.sqlite'}", f"sqlite:///{tmp_path / 'results.sqlite'}"
    with ResultsStore(spool) as kept:
        kept.add_run(make_run("spooled", minute=1), baseline="saved")
    assert main(["results", "push", "--results", spool, "--to", store]) == 0
    with ResultsStore(store) as target:
        assert target.baseline("rock-5c-aaaa", make_run("x").key.experiment)[0].run_id == "spooled"
        target.add_run(make_run("later", minute=2), baseline="saved")
    assert main(["results", "push", "--results", spool, "--to", store]) == 0
    with ResultsStore(store) as target:
        assert target.baseline("rock-5c-aaaa", make_run("x").key.experiment)[0].run_id == "later"
