"""A pytest plugin (`-p tests.stop_server`, or imported) that loses the PostgreSQL server under its
clients: with STOP_SERVER_AT=TEXT in the environment, the first SQL statement sent to PostgreSQL whose
text holds TEXT stops the server of the cluster under STOP_SERVER_ROOT (tests/postgres.py, pg_ctl in
STOP_SERVER_BIN) before it runs, so that statement meets a server that is gone. Only the moment is
chosen: the server, its stop and the client's error are real.

    STOP_SERVER_AT="FROM runs"          the first read after the store was opened
    STOP_SERVER_AT="INSERT INTO runs"   the write of a run, after the verdict's reads
"""
from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.postgres import halt_server

__all__ = ["stop_server_at"]


@event.listens_for(Engine, "before_cursor_execute")
def stop_server_at(conn, cursor, statement, parameters, context, executemany):
    where = os.environ.get("STOP_SERVER_AT")
    if where and where in statement and conn.dialect.name == "postgresql":
        del os.environ["STOP_SERVER_AT"]        # once: the server stays down until the test starts it
        halt_server(Path(os.environ["STOP_SERVER_BIN"]), Path(os.environ["STOP_SERVER_ROOT"]), os.geteuid() == 0)
