"""The results store: every benchmark run of every board, in SQLite (one file) or PostgreSQL (a fleet).

    store = ResultsStore("sqlite:///.benchmarks/results.sqlite")    # or postgresql://user@host/db
    store.add_run(run)                  # one transaction: the whole run (quality metrics too) or nothing
    store.runs(board="rock-5c-1a2b", key=run.key.digest, valid=True)
    store.set_baseline(run, "saved")    # the board's accepted reference for the run's experiment
    store.add_ab_session(record)        # an interleaved A/B session: both sides' runs, pairs, verdicts
    with store.pending([run]) as view:  # reads as if `run` were written; nothing of it remains after
        view.runs(board=run.board_id)

The URL is SQLAlchemy's: `sqlite:///relative.sqlite`, `sqlite:////absolute.sqlite`, `postgresql://...`
(psycopg 3 is the driver). Opening a store brings its schema to the newest alembic revision, under a
lock (SQLite's write lock, PostgreSQL's advisory lock) so two processes opening one store at once do not
both migrate it.

SQLite runs in WAL mode: readers never wait for the writer, and a writer killed mid-run (SIGKILL, power)
leaves a journal that the next open rolls back, so the run is whole or absent. Each write takes the write
lock at its start (BEGIN IMMEDIATE) and waits up to BUSY_SECONDS for another writer: two runs finishing
at once are written one after the other, neither is lost.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import json
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import case, create_engine, delete, event, func, insert, inspect, or_, select, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, SQLAlchemyError

from .records import ResultsError, Run, RunKey, SubgraphTime, utc_now
from .sessions import SIDES, ABRecord, verdict_of
from .tables import (
    ab_rounds,
    ab_sessions,
    ab_verdicts,
    baselines,
    run_branches,
    run_quality,
    run_stages,
    run_steps,
    run_subgraphs,
    runs,
)

__all__ = ["ResultsStore", "StoreUnavailable", "DEFAULT_RESULTS", "BUSY_SECONDS", "describe_url",
           "absolute_url", "sqlite_path", "check_url"]

DEFAULT_RESULTS = "sqlite:///.benchmarks/results.sqlite"
BUSY_SECONDS = 60
MIGRATIONS = Path(__file__).with_name("migrations")
_MIGRATION_LOCK = 0x616E696D61       # PostgreSQL advisory lock id of the schema upgrade ("anima")
# The revisions of the days before the schema was squashed into one: a store stamped with one is old, not newer.
_SQUASHED = frozenset({"0001", "0002", "0003"})
# The newest migration's revision (tests/unit/test_results_store.py checks it is alembic's head): a
# store stamped with it is opened without importing alembic or reading the migration scripts, which
# cost about 0.5 s of every command's start.
SCHEMA_HEAD = "memory"
_WRITE = "anima_write"               # execution option of a connection that writes


def describe_url(url) -> str:
    """The URL without its password, for messages and reports."""
    try:
        return make_url(str(url)).render_as_string(hide_password=True)
    except ArgumentError:
        return str(url)


def sqlite_path(url: str) -> Path | None:
    """The file of a sqlite:/// URL, None for another database (or a URL that is none)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    return Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None


def absolute_url(url: str, base: Path) -> str:
    """`url` with a relative SQLite file made absolute under `base`: the store a run writes to must
    not depend on where a later command is started."""
    path = sqlite_path(url)
    if path is None or path.is_absolute() or str(path) == ":memory:":
        return url
    return make_url(url).set(database=str(base / path)).render_as_string(hide_password=False)


class StoreUnavailable(ResultsError):
    """The store could not be read or written (the server went away, a lock held past BUSY_SECONDS):
    nothing is wrong with what was asked, so a run that could not be written is worth keeping."""


def check_url(url: str):
    """The parsed URL of a store the suite can open: SQLite or PostgreSQL, with its driver installed.
    Checked without connecting (pytest: at configure time, before anything runs)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ResultsError(f"--results {url!r}: not a database URL (e.g. sqlite:///.benchmarks/results.sqlite "
                           "or postgresql://user@host/db)") from None
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise ResultsError(f"--results {describe_url(url)}: choose a sqlite:/// or postgresql:// URL (not {backend})")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        parsed.get_dialect().import_dbapi()
    except (ImportError, NoSuchModuleError) as exc:     # a driver not installed, or no such driver
        why = f"not installed ({exc})" if isinstance(exc, ImportError) else "unknown to SQLAlchemy"
        raise ResultsError(f"--results {describe_url(url)}: database driver {parsed.drivername!r} is {why}; "
                           "postgresql:// uses psycopg 3, which is installed") from None
    return parsed


def _engine(url: str) -> Engine:
    parsed = check_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed)
    return create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def _driver_errors() -> tuple:
    """SQLAlchemy's wrapped errors and the drivers' own: the pool's pre-ping of a connection whose
    server is gone can raise psycopg's error unwrapped."""
    import sqlite3
    try:
        import psycopg
    except ImportError:
        return (DBAPIError, sqlite3.Error)
    return (DBAPIError, sqlite3.Error, psycopg.Error)


def _guarded(what: str):
    """A store method whose database errors (a server gone, a lock held too long) are one line naming
    the store and what was being done, never SQLAlchemy's traceback. The transaction it was in is
    rolled back, so the store is as it was."""
    def wrap(method):
        @functools.wraps(method)
        def guarded(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except _driver_errors() as exc:
                raise StoreUnavailable(f"results store {self.where}: {what} failed ({_first_line(exc)}); "
                                       "the store is as it was") from None
        return guarded
    return wrap


def _wal(dbapi) -> None:
    """WAL mode, kept in the file once set. Switching to it needs the database to itself, and SQLite
    answers "locked" at once instead of waiting when another process opens the new file at the same
    moment (two first runs): the switch is retried until BUSY_SECONDS have passed."""
    deadline = time.monotonic() + BUSY_SECONDS
    while dbapi.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            dbapi.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_engine(parsed) -> Engine:
    if not parsed.database or parsed.database == ":memory:":
        raise ResultsError(f"--results {parsed}: name a file (sqlite:///.benchmarks/results.sqlite); "
                           "an in-memory store forgets every run")
    Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, connect_args={"timeout": BUSY_SECONDS})

    @event.listens_for(engine, "connect")
    def _connect(dbapi, _record):
        # pysqlite's own transaction handling defers BEGIN and cannot take the write lock up front:
        # turn it off and begin explicitly below.
        dbapi.isolation_level = None
        for pragma in (f"busy_timeout={BUSY_SECONDS * 1000}", "synchronous=FULL", "foreign_keys=ON"):
            dbapi.execute(f"PRAGMA {pragma}")
        _wal(dbapi)

    @event.listens_for(engine, "begin")
    def _begin(conn):
        # a write takes the write lock up front (a deferred one could fail to upgrade to it); a read
        # takes none: in WAL mode it reads the last committed state and never waits for a writer
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")
    return engine


class ResultsStore:
    """One results database (see the module docstring)."""

    _pinned: Connection | None = None       # the connection of a view of pending()

    def __init__(self, url: str = DEFAULT_RESULTS, create: bool = True):
        """`create=False` (the commands that only read): a SQLite file that is not there is an error,
        not a new empty store made by a typo."""
        self.url = str(url)
        path = sqlite_path(self.url)
        if not create and path is not None and not path.expanduser().is_file():
            raise ResultsError(f"no results store at {path}: run the benchmark gate (pytest -m benchmark) "
                               "or `bin/harness results import` another store's export first")
        self.engine = _engine(self.url)
        try:
            self._upgrade()
        except DBAPIError as exc:       # no server, wrong password, not a database file
            self.engine.dispose()
            raise StoreUnavailable(f"results store {describe_url(self.url)}: cannot open "
                                   f"({str(exc.orig).strip() or type(exc.orig).__name__})") from None
        except sqlite3.Error as exc:    # raised by the connect hook itself (the WAL switch), not wrapped
            self.engine.dispose()
            raise StoreUnavailable(f"results store {describe_url(self.url)}: cannot open ({exc})") from None
        except ResultsError:
            self.engine.dispose()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def _writing(self):
        """A connection in a write transaction: committed when the block ends, rolled back on error.
        In a view of pending(): a SAVEPOINT in its transaction, rolled back with it."""
        if self._pinned is not None:
            with self._pinned.begin_nested():
                yield self._pinned
            return
        with self.engine.connect() as conn:
            conn.execution_options(**{_WRITE: True})
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def _reading(self):
        """A connection to read on: a new one, or in a view of pending() the one holding its transaction."""
        if self._pinned is not None:
            yield self._pinned
            return
        with self.engine.connect() as conn:
            yield conn

    @contextlib.contextmanager
    def pending(self, runs: list[Run]) -> Iterator[ResultsStore]:
        """The store as it will be once `runs` are written (filed under their boards, as add_run files
        them; none of them a baseline): a view of it whose reads run the store's own queries inside one
        write transaction that holds `runs` and is rolled back when the block ends, also when the block
        raises, so nothing of them remains. What a second run of a session is judged against when the
        first must count as written (judge.confirm). The view is good inside the block only; on SQLite
        it holds the write lock for the block (another writer waits, up to BUSY_SECONDS)."""
        with self._rolled_back(lambda view: view._hold(runs)) as view:
            yield view

    @contextlib.contextmanager
    def as_before(self, run: Run) -> Iterator[ResultsStore]:
        """The store as it was before the stored `run` was written: a view whose reads run the store's
        own queries inside one write transaction that deletes `run` and every run written after it
        (their rows, baselines and A/B sessions go with them) and is rolled back when the block ends,
        so nothing is lost. What `results check` judges a stored run against, as the gate did. On
        SQLite it holds the write lock for the block, as pending() does."""
        with self._rolled_back(lambda view: view._forget_from(run)) as view:
            yield view

    @contextlib.contextmanager
    def _rolled_back(self, change: Callable[[ResultsStore], None]) -> Iterator[ResultsStore]:
        """A view of the store whose reads run inside one write transaction that `change` edits first
        and that is rolled back when the block ends, also when it raises: pending() and as_before()."""
        try:
            conn = self.engine.connect()
            conn.execution_options(**{_WRITE: True})
            transaction = conn.begin()
        except _driver_errors() as exc:
            raise StoreUnavailable(f"results store {self.where}: opening a transaction failed "
                                   f"({_first_line(exc)}); the store is as it was") from None
        try:
            view = copy.copy(self)
            view._pinned = conn
            change(view)
            yield view
        finally:
            # a rollback that fails has lost its connection, and an uncommitted transaction ends with it
            with contextlib.suppress(*_driver_errors()):
                transaction.rollback()
            conn.close()

    @_guarded("hiding the runs written after a run")
    def _forget_from(self, run: Run) -> None:
        """as_before()'s deletes, inside its view's transaction."""
        with self._writing() as conn:
            pk = _run_pk(conn, run.run_id, run.key.case)
            if pk is None:
                raise ResultsError(f"results store {self.where}: run {run.run_id!r} is not stored")
            conn.execute(delete(runs).where(runs.c.id >= pk))

    @_guarded("writing runs not yet written into a transaction")
    def _hold(self, runs: list[Run]) -> None:
        """pending()'s runs, written into its view's transaction."""
        try:
            with self._writing() as conn:
                for run in runs:
                    _insert_run(conn, _filed(conn, run))
        except IntegrityError as exc:
            raise ResultsError(f"results store {self.where}: a run judged as not yet written is stored already "
                               f"({_first_line(exc)})") from None

    @property
    def where(self) -> str:
        return describe_url(self.url)

    def _at_head(self) -> bool:
        """True when the store is stamped with SCHEMA_HEAD alone (a new store has no stamp table)."""
        with self.engine.connect() as conn:
            if not inspect(conn).has_table("alembic_version"):
                return False
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [SCHEMA_HEAD]

    def _upgrade(self) -> None:
        if self._at_head():
            return
        from alembic import command
        from alembic.config import Config
        from alembic.script import ScriptDirectory
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self._writing() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK})
            self._refuse_unknown_revision(conn, ScriptDirectory.from_config(config))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def _refuse_unknown_revision(self, conn, script) -> None:
        """A store stamped with a revision this checkout does not have was written by newer code:
        upgrading it ends in alembic's traceback, and reading it could misread its tables."""
        from alembic.runtime.migration import MigrationContext
        known = {r.revision for r in script.walk_revisions()}
        unknown = [r for r in MigrationContext.configure(conn).get_current_heads() if r not in known]
        if unknown and unknown[0] in _SQUASHED:
            raise ResultsError(f"results store {self.where}: schema revision {unknown[0]} is from before the "
                               f"schema became one revision ({script.get_current_head()}): export its runs with "
                               "`results export` from an older checkout and `results import` them into a new "
                               "store, or delete it; nothing was written")
        if unknown:
            raise ResultsError(f"results store {self.where}: schema revision {unknown[0]} is newer than this "
                               f"checkout's ({script.get_current_head()}): update the checkout to use it; "
                               "nothing was written")

    # -- writing -------------------------------------------------------------------------------------

    def add_run(self, run: Run, baseline: str | None = None) -> None:
        """Write `run` whole in one transaction, its quality metrics included; with `baseline` (why,
        e.g. "saved") it becomes its board's baseline for its experiment in the same transaction. A
        run id already stored for its case is an error."""
        try:
            with self._writing() as conn:
                run = _filed(conn, run)
                pk = _insert_run(conn, run)
                if baseline is not None:
                    _point_baseline(conn, run, pk, baseline)
        except IntegrityError as exc:
            if self.has_run(run.run_id, run.key.case):
                raise ResultsError(f"results store {self.where}: run {run.run_id!r} of case {run.key.case!r} "
                                   "is already stored (run ids are unique)") from None
            raise ResultsError(f"results store {self.where}: run {run.run_id!r} rejected "
                               f"({str(exc.orig).splitlines()[0]})") from None
        except _driver_errors() as exc:     # locked past BUSY_SECONDS, or the server went away
            raise StoreUnavailable(f"results store {self.where}: run {run.run_id!r} not written "
                                   f"({_first_line(exc)}); the store is as it was") from None

    def add_runs(self, runs: list[Run]) -> None:
        """Write `runs` in one transaction, all or none (`results import`); a stored id is an error."""
        try:
            with self._writing() as conn:
                for run in runs:
                    _insert_run(conn, run)
        except IntegrityError as exc:
            raise ResultsError(f"results store {self.where}: runs rejected ({_first_line(exc)}); "
                               "the store is as it was") from None
        except _driver_errors() as exc:
            raise StoreUnavailable(f"results store {self.where}: runs not written ({_first_line(exc)}); "
                                   "the store is as it was") from None

    def add_ab_session(self, record: ABRecord) -> None:
        """Write an A/B session whole in one transaction: both sides' runs, every round's figures and
        the verdicts (harness.results.sessions)."""
        try:
            with self._writing() as conn:
                _insert_session(conn, record)
        except IntegrityError as exc:
            raise ResultsError(f"results store {self.where}: A/B session {record.session_id!r} of case "
                               f"{record.case!r} rejected ({str(exc.orig).splitlines()[0]}); is it stored "
                               "already?") from None
        except _driver_errors() as exc:
            raise StoreUnavailable(f"results store {self.where}: A/B session {record.session_id!r} not written "
                                   f"({_first_line(exc)}); the store is as it was") from None

    @_guarded("filing a run under its board")
    def filed(self, run: Run) -> Run:
        """`run` under the board id and board model the store files its serial under (its board's first
        run's): a board whose device-tree model string changed ("ROCK 5C" -> "ROCK 5C Rev 1.1") keeps its
        id, its history and its baseline, and stays in its board model's fleet. A run without a serial
        hash, or of a serial the store has not seen, is as it was. add_run files every run it writes."""
        with self._reading() as conn:
            return _filed(conn, run)

    @_guarded("reading A/B sessions")
    def ab_sessions(self, *, board: str | None = None, case: str | None = None) -> list[ABRecord]:
        """Stored A/B sessions matching the filters, oldest first."""
        query = select(ab_sessions)
        if board is not None:
            query = query.where(ab_sessions.c.board_id == board)
        if case is not None:
            query = query.where(ab_sessions.c.case_name == case)
        with self._reading() as conn:
            rows = conn.execute(query.order_by(ab_sessions.c.time, ab_sessions.c.id)).mappings().all()
            return [_session_of(conn, row) for row in rows]

    @_guarded("setting a baseline")
    def set_baseline(self, run: Run, reason: str) -> None:
        """Make the stored `run` its board's baseline for its experiment (replacing the one before)."""
        with self._writing() as conn:
            pk = _run_pk(conn, run.run_id, run.key.case)
            if pk is None:
                raise ResultsError(f"results store {self.where}: run {run.run_id!r} is not stored, "
                                   "so it cannot be a baseline")
            _point_baseline(conn, run, pk, reason)

    # -- reading -------------------------------------------------------------------------------------

    @_guarded("reading runs")
    def has_run(self, run_id: str, case: str) -> bool:
        with self._reading() as conn:
            return _run_pk(conn, run_id, case) is not None

    # Keyword-only filters, one per column (the query's own words); their callers are in results/verdict.
    @_guarded("reading runs")
    def runs(self, *, board: str | None = None, board_model: str | None = None,  # noqa: PLR0913
             key: str | None = None, experiment: str | None = None, valid: bool | None = None, case: str | None = None,
             backend: str | None = None, run_id: str | None = None, other_than_board: str | None = None,
             cpus: int | None = None, latest: int | None = None, whole: bool = True) -> list[Run]:
        """Stored runs matching every filter given (`other_than_board`: of any board but that one;
        `cpus`: run on that many CPUs or with no host condition recorded), oldest first; with
        `latest`, only the newest that many of them (a verdict needs its lookback, not a fleet's whole
        history read with every child row). `whole=False`: without their steps', subgraphs' and quality
        rows (what a verdict's figures and the results site read: a run of the 84-subgraph partition
        has 84 subgraph rows, a lab's store of 10,000 runs most of its reading time in them)."""
        query = select(runs)
        for column, value in (("board_id", board), ("board_model", board_model), ("key_digest", key),
                              ("experiment", experiment), ("valid", valid), ("case_name", case),
                              ("backend", backend), ("run_id", run_id)):
            if value is not None:
                query = query.where(runs.c[column] == value)
        if other_than_board is not None:
            query = query.where(runs.c.board_id != other_than_board)
        if cpus is not None:
            query = query.where(or_(runs.c.host_cpus.is_(None), runs.c.host_cpus == cpus))
        if latest is not None:
            query = query.order_by(runs.c.time.desc(), runs.c.id.desc()).limit(latest)
        else:
            query = query.order_by(runs.c.time, runs.c.id)
        with self._reading() as conn:
            rows = conn.execute(query).mappings().all()
            return _with_children(conn, rows[::-1] if latest is not None else rows, _CHILDREN if whole else _FIGURES)

    def run(self, run_id: str, case: str | None = None) -> Run:
        """The run with this id (and case, when the id has several)."""
        found = self.runs(case=case, run_id=run_id)
        if len(found) != 1:
            cases = ", ".join(r.key.case for r in found)
            raise ResultsError(f"results store {self.where}: " + (
                f"no run {run_id!r}" if not found else f"run {run_id!r} has several cases ({cases}): name one"))
        return found[0]

    @_guarded("reading a baseline")
    def baseline(self, board: str, experiment: str) -> tuple[Run, str] | None:
        """(run, reason) of the board's baseline for the experiment, or None."""
        with self._reading() as conn:
            row = conn.execute(select(runs, baselines.c.reason).join(baselines, baselines.c.run == runs.c.id)
                               .where(baselines.c.board_id == board, baselines.c.experiment == experiment)
                               ).mappings().first()
            return (_with_children(conn, [row])[0], row["reason"]) if row else None

    @_guarded("reading the fleet's baselines")
    def fleet_baseline(self, board_model: str, experiment: str, exclude_board: str) -> tuple[Run, str] | None:
        """(run, reason) of the newest baseline of another board of the same model, or None."""
        with self._reading() as conn:
            row = conn.execute(select(runs, baselines.c.reason).join(baselines, baselines.c.run == runs.c.id)
                               .where(runs.c.board_model == board_model, baselines.c.experiment == experiment,
                                      baselines.c.board_id != exclude_board)
                               .order_by(baselines.c.saved.desc(), baselines.c.id.desc())).mappings().first()
            return (_with_children(conn, [row])[0], row["reason"]) if row else None

    @_guarded("counting a board's stacks")
    def stacks(self, board: str, experiment: str) -> list[tuple[str, int, int]]:
        """(key digest, runs, valid runs) of every key under which the board ran the experiment, in the
        order of each key's first run: which stack came first and how many runs each has had (counted
        in the database: a fleet's board may have thousands)."""
        query = (select(runs.c.key_digest, func.count(), func.sum(case((runs.c.valid, 1), else_=0)))
                 .where(runs.c.board_id == board, runs.c.experiment == experiment)
                 .group_by(runs.c.key_digest).order_by(func.min(runs.c.time), func.min(runs.c.id)))
        with self._reading() as conn:
            return [(digest, int(count), int(valid or 0)) for digest, count, valid in conn.execute(query)]

    @_guarded("reading baselines")
    def baseline_pairs(self) -> list[tuple[str, str, str, str]]:
        """(board, run id, case, reason) of every baseline, the one saved last last (fleet_baseline
        takes the newest): what `push` copies besides the runs."""
        with self._reading() as conn:
            return [tuple(r) for r in conn.execute(
                select(baselines.c.board_id, runs.c.run_id, runs.c.case_name, baselines.c.reason)
                .join(runs, baselines.c.run == runs.c.id).order_by(baselines.c.saved, baselines.c.id))]

    @_guarded("reading the order runs were written in")
    def written_order(self) -> dict[tuple[str, str], int]:
        """(run id, case) -> its place in the order the runs were written: as_before(run) hides a run
        and every run written after it."""
        with self._reading() as conn:
            return {(run_id, case_name): pk for pk, run_id, case_name in
                    conn.execute(select(runs.c.id, runs.c.run_id, runs.c.case_name))}

    def push(self, target: ResultsStore) -> tuple[int, int]:
        """Copy the runs and baselines `target` lacks; (runs copied, runs it had). Idempotent."""
        copied = had = 0
        sessions = self.ab_sessions()
        sides = {(r.run_id, r.key.case) for s in sessions for r in (s.a, s.b)}
        for session in sessions:
            if target.has_run(session.a.run_id, session.case):
                had += 2
                continue
            target.add_ab_session(session)
            copied += 2
        for run in self.runs():
            if (run.run_id, run.key.case) in sides:
                continue
            if target.has_run(run.run_id, run.key.case):
                had += 1
                continue
            target.add_run(run)
            copied += 1
        theirs = {(b, r, c) for b, r, c, _ in target.baseline_pairs()}
        for board, run_id, case_name, reason in self.baseline_pairs():
            if (board, run_id, case_name) not in theirs:
                _newer_baseline(target, target.run(run_id, case_name), reason)
        return copied, had


def _newer_baseline(target: ResultsStore, run: Run, reason: str) -> None:
    """Make `run` its board's baseline in `target` unless the baseline there is a later run: a spool or
    a board store pushed again must not take a board back to the baseline it had before."""
    current = target.baseline(run.board_id, run.key.experiment)
    if current is None or current[0].time < run.time:
        target.set_baseline(run, reason)


def _run_pk(conn, run_id: str, case: str) -> int | None:
    return conn.execute(select(runs.c.id).where(runs.c.run_id == run_id, runs.c.case_name == case)).scalar()


def _point_baseline(conn, run: Run, pk: int, reason: str) -> None:
    """Make the run with primary key `pk` its board's baseline for its experiment (replacing the one before)."""
    conn.execute(delete(baselines).where(baselines.c.board_id == run.board_id,
                                         baselines.c.experiment == run.key.experiment))
    conn.execute(insert(baselines).values(board_id=run.board_id, experiment=run.key.experiment,
                                          run=pk, saved=utc_now(), reason=reason))


def _insert_run(conn, run: Run) -> int:
    """The run's row and its children; its primary key."""
    k = run.key
    pk = conn.execute(insert(runs).values(
        run_id=run.run_id, case_name=k.case, time=run.time, board_id=run.board_id, board_model=run.board_model,
        model=run.model, backend=k.backend, precision=k.precision, steps=k.steps, manifest_hash=k.manifest_hash,
        versions=json.dumps(k.versions, sort_keys=True), key_digest=k.digest, experiment=k.experiment,
        valid=run.valid, invalid_reasons=json.dumps(list(run.invalid_reasons)), mean_step_s=run.mean_step_s,
        total_denoise_s=run.total_denoise_s, peak_pss_added_bytes=run.peak_pss_added_bytes,
        git_revision=run.git_revision, ci_url=run.ci_url, kernel=run.kernel, host_cpus=run.host_cpus,
        host_memory_bytes=run.host_memory_bytes, host_load=run.host_load, host_probe_s=run.host_probe_s,
        serial_hash=run.serial_hash, device_model=run.device_model)).inserted_primary_key[0]
    children = (
        (run_stages, [{"stage": s, "seconds_per_step": v} for s, v in run.stages.items()]),
        (run_branches, [{"branch": b, "seconds_per_step": v} for b, v in run.branches.items()]),
        (run_steps, [{"step": i, "seconds": v} for i, v in enumerate(run.step_s)]),
        (run_subgraphs, [{"subgraph": s.subgraph, "block": s.block, "branch": s.branch,
                          "seconds_per_step": s.seconds_per_step} for s in run.subgraphs]),
        (run_quality, [{"metric": m, "value": v} for m, v in run.quality.items()]),
    )
    for table, rows in children:
        if rows:
            conn.execute(insert(table), [{"run": pk, **row} for row in rows])
    return pk


def _filed(conn, run: Run) -> Run:
    """ResultsStore.filed on an open connection (inside add_run's write transaction)."""
    if run.serial_hash is None:
        return run
    first = conn.execute(select(runs.c.board_id, runs.c.board_model).where(runs.c.serial_hash == run.serial_hash)
                         .order_by(runs.c.time, runs.c.id).limit(1)).first()
    return replace(run, board_id=first.board_id, board_model=first.board_model) if first else run


# An interval's upper end past this many % says no more than one at it: a session of 3 pairs on a busy
# host reaches 1e15 % (issue 41), and the table keeps shifts finite (tables._PCT's bound).
_WIDEST_PCT = 999_999.0


def _insert_session(conn, record: ABRecord) -> None:
    # The columns are named by the sides' stored keys (ab.A is 'baseline', ab.B 'candidate': sessions.py)
    record = replace(record, a=_filed(conn, record.a), b=_filed(conn, record.b))
    a, b = SIDES
    pk = conn.execute(insert(ab_sessions).values(
        session_id=record.session_id, case_name=record.case, time=record.a.time, board_id=record.a.board_id,
        **{f"{a}_run": _insert_run(conn, record.a), f"{b}_run": _insert_run(conn, record.b),
           f"{a}_partition": record.a_partition, f"{b}_partition": record.b_partition,
           f"{a}_options": json.dumps(record.a_options, sort_keys=True),
           f"{b}_options": json.dumps(record.b_options, sort_keys=True)}, lifecycle=record.lifecycle,
        rounds=len(record.pairs), warmup=record.warmup, threshold_pct=record.threshold_pct,
        confidence=record.confidence, regression=record.regression)).inserted_primary_key[0]
    conn.execute(insert(ab_rounds), [{"session": pk, "round": i, "side": side, "figure": figure, "seconds": seconds}
                                     for i, pair in enumerate(record.pairs) for side in SIDES
                                     for figure, seconds in pair[side].items()])
    if record.verdicts:
        conn.execute(insert(ab_verdicts), [
            {"session": pk, "place": i, "figure": v.label, "kind": v.kind, "shift_pct": v.shift_pct,
             "ci_low_pct": v.ci_pct[0],
             "ci_high_pct": min(v.ci_pct[1], _WIDEST_PCT), "threshold_pct": v.threshold_pct, "confidence": v.confidence,
             "regression": v.regression, "n": v.n, "statistic": v.statistic, "p_value": v.p_value}
            for i, v in enumerate(record.verdicts)])


def _session_of(conn, row) -> ABRecord:
    sides = {side: _with_children(conn, conn.execute(select(runs).where(runs.c.id == row[f"{side}_run"]))
                                  .mappings().all())[0] for side in SIDES}
    pairs: list[dict[str, dict[str, float]]] = [{side: {} for side in SIDES} for _ in range(row["rounds"])]
    for r in conn.execute(select(ab_rounds).where(ab_rounds.c.session == row["id"])).mappings():
        pairs[r["round"]][r["side"]][r["figure"]] = r["seconds"]
    verdicts = [verdict_of(v) for v in conn.execute(select(ab_verdicts).where(ab_verdicts.c.session == row["id"])
                                                    .order_by(ab_verdicts.c.place)).mappings()]
    a, b = SIDES
    return ABRecord(session_id=row["session_id"], a=sides[a], b=sides[b], a_partition=row[f"{a}_partition"],
                    b_partition=row[f"{b}_partition"], pairs=tuple(pairs), verdicts=tuple(verdicts),
                    threshold_pct=row["threshold_pct"], confidence=row["confidence"], lifecycle=row["lifecycle"],
                    warmup=row["warmup"], a_options=json.loads(row[f"{a}_options"]),
                    b_options=json.loads(row[f"{b}_options"]))


# A run's child tables and the names _run_of reads them by; _FIGURES: those a verdict's figures need.
_CHILDREN = ((run_stages, "stages"), (run_branches, "branches"), (run_steps, "steps"),
             (run_subgraphs, "subgraphs"), (run_quality, "quality"))
_FIGURES = _CHILDREN[:2]


def _with_children(conn, rows, children=_CHILDREN) -> list[Run]:
    ids = [row["id"] for row in rows]
    if not ids:
        return []
    per: defaultdict[Any, defaultdict[str, list]] = defaultdict(lambda: defaultdict(list))
    for table, name in children:
        for child in conn.execute(select(table).where(table.c.run.in_(ids))).mappings():
            per[child["run"]][name].append(child)
    return [_run_of(row, per[row["id"]]) for row in rows]


def _run_of(row, children) -> Run:
    try:
        return Run(
            run_id=row["run_id"], time=row["time"], board_id=row["board_id"], board_model=row["board_model"],
            model=row["model"], valid=bool(row["valid"]), mean_step_s=row["mean_step_s"],
            total_denoise_s=row["total_denoise_s"],
            key=RunKey(case=row["case_name"], steps=row["steps"], precision=row["precision"],
                       backend=row["backend"], manifest_hash=row["manifest_hash"],
                       versions=json.loads(row["versions"])),
            stages={c["stage"]: c["seconds_per_step"] for c in children["stages"]},
            branches={c["branch"]: c["seconds_per_step"] for c in children["branches"]},
            step_s=tuple(c["seconds"] for c in sorted(children["steps"], key=lambda c: c["step"])),
            subgraphs=tuple(SubgraphTime(c["subgraph"], c["block"], c["branch"], c["seconds_per_step"])
                            for c in children["subgraphs"]),
            quality={c["metric"]: c["value"] for c in children["quality"]},
            invalid_reasons=tuple(json.loads(row["invalid_reasons"])), git_revision=row["git_revision"],
            ci_url=row["ci_url"], kernel=row["kernel"], peak_pss_added_bytes=row["peak_pss_added_bytes"],
            host_cpus=row["host_cpus"], host_memory_bytes=row["host_memory_bytes"], host_load=row["host_load"],
            host_probe_s=row["host_probe_s"], serial_hash=row["serial_hash"], device_model=row["device_model"])
    except (ValueError, SQLAlchemyError) as exc:
        raise ResultsError(f"run {row['run_id']!r}: stored row unreadable ({exc})") from None
