"""The PostgreSQL fixtures (tests/postgres.py's cluster), in a module of their own: tests/conftest.py
imports them, and so does a pytest session that needs only them (test_results_store's holder), without the
conftest's libraries (scipy, ruptures, onnx: ~3 s of CPU per session)."""
import pytest

from tests.helpers import missing_tool


def _cluster():
    """A throw-away PostgreSQL server (tests/postgres.py), started; in CI a missing server fails."""
    from tests.postgres import PostgresCluster, find_pg_bin
    bin_dir = find_pg_bin()
    if bin_dir is None:
        missing_tool("no PostgreSQL server (initdb) here: install Debian's postgresql (bin/debian-packages.txt)")
    return PostgresCluster(bin_dir).start()


@pytest.fixture(scope="session")
def postgres_cluster():
    """The session's PostgreSQL server."""
    cluster = _cluster()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def halting_postgres():
    """A PostgreSQL server of one test module's own, for tests that stop it under its clients."""
    cluster = _cluster()
    yield cluster
    cluster.stop()


@pytest.fixture
def lost_server(halting_postgres, monkeypatch):
    """halting_postgres with tests/stop_server.py told where it is (STOP_SERVER_AT then chooses the
    statement that stops it); the server runs again after the test."""
    import tests.stop_server  # noqa: F401 - registers the statement hook (inert without STOP_SERVER_AT)
    monkeypatch.setenv("STOP_SERVER_BIN", str(halting_postgres.bin))
    monkeypatch.setenv("STOP_SERVER_ROOT", str(halting_postgres.root))
    yield halting_postgres
    if not (halting_postgres.data / "postmaster.pid").exists():
        halting_postgres.resume()
