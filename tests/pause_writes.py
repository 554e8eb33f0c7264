"""A pytest plugin for the results store's kill tests (`-p tests.pause_writes`): with PAUSE_AT=TEXT in
the environment, the process stops at the first SQL statement whose text holds TEXT, before running
it, and creates the file PAUSE_FILE to say so; the test then kills it there with SIGKILL. The
database is the real one: only the moment of the kill is chosen."""
from __future__ import annotations

import os
import time
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine

__all__ = ["pause_at"]


@event.listens_for(Engine, "before_cursor_execute")
def pause_at(conn, cursor, statement, parameters, context, executemany):
    where = os.environ.get("PAUSE_AT")
    if where and where in statement:
        Path(os.environ["PAUSE_FILE"]).write_text(statement)
        time.sleep(600)
